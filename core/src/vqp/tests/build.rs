//! Building a virtual QP and attaching its CQs: the sizing and configuration errors.

use super::*;

#[test]
fn cq_sizing_is_checked_at_attach() {
    let f = Fabric::default();
    let data = (0..4).map(|i| (MockQp { qpn: i, f: &f }, 0));
    let mut vqp = Vqp::new(config(Mode::Dqplb), data, None).unwrap();
    let mut vcq = Vcq::new();
    vcq.add_cq(MockCq(&f), 0, 79).unwrap();
    assert_eq!(
        vcq.attach(&mut vqp),
        Err(CqError::TooSmall {
            device: 0,
            capacity: 79,
            needed: 80
        })
    );
    let mut other = Vcq::new();
    other.add_cq(MockCq(&f), 1, 1000).unwrap();
    assert_eq!(other.attach(&mut vqp), Err(CqError::NoCq(0)));
}

#[test]
fn build_errors_are_reported() {
    let f = Fabric::default();
    let qp = |n| (MockQp { qpn: n, f: &f }, 0u8);
    assert!(matches!(
        Vqp::new(config(Mode::Spray), [qp(1), qp(2)], None),
        Err(BuildError::NotifyQp { given: false })
    ));
    assert!(matches!(
        Vqp::new(config(Mode::Dqplb), [qp(1), qp(2)], Some(qp(3))),
        Err(BuildError::NotifyQp { given: true })
    ));
    assert!(matches!(
        Vqp::new(
            config(Mode::Dqplb),
            [qp(1), qp(2), qp(3), qp(4), qp(5)],
            None
        ),
        Err(BuildError::DataQps { given: 5, .. })
    ));
    let cfg = Config {
        max_outstanding: 17,
        ..config(Mode::Dqplb)
    };
    assert!(matches!(
        Vqp::new(cfg, [qp(1)], None),
        Err(BuildError::MaxOutstanding { given: 17, .. })
    ));
}

#[test]
fn a_window_too_small_for_the_depths_is_refused() {
    let f = Fabric::default();
    let cfg = Config {
        recv_depth: 17,
        ..config(Mode::Dqplb)
    };
    let data = (0..4).map(|i| (MockQp { qpn: i, f: &f }, 0));
    assert!(matches!(
        Vqp::new(cfg, data, None),
        Err(BuildError::Window {
            window: 128,
            needed: 132
        })
    ));
}
