//! The structs of `rdma_cma.h` as this crate lays them out, against the system's header
//! compiled by gcc (Debian packages `librdmacm-dev` and `gcc`): sizes and the offset of
//! every field a program reads.

#[allow(dead_code)]
#[path = "../../sys/tests/system/gate.rs"]
mod gate;

use std::mem::{offset_of, size_of};
use std::process::Command;

use vqp_rdmacm::abi::*;

const PROBE: &str = r#"
#include <stdio.h>
#include <stddef.h>
#include <rdma/rdma_cma.h>
#define S(t) printf(#t " %zu\n", sizeof(struct t));
#define O(t, f) printf(#t "." #f " %zu\n", offsetof(struct t, f));
int main(void) {
  S(ibv_sa_path_rec) S(rdma_addr) S(rdma_route) S(rdma_cm_id) S(rdma_conn_param)
  S(rdma_ud_param) S(rdma_cm_event) S(rdma_addrinfo) S(rdma_event_channel)
  O(ibv_sa_path_rec, dlid) O(ibv_sa_path_rec, pkey) O(ibv_sa_path_rec, mtu)
  O(ibv_sa_path_rec, packet_life_time) O(rdma_addr, dst_addr) O(rdma_addr, addr)
  O(rdma_route, path_rec) O(rdma_route, num_paths)
  O(rdma_cm_id, verbs) O(rdma_cm_id, channel) O(rdma_cm_id, context) O(rdma_cm_id, qp)
  O(rdma_cm_id, route) O(rdma_cm_id, ps) O(rdma_cm_id, port_num) O(rdma_cm_id, event)
  O(rdma_cm_id, send_cq_channel) O(rdma_cm_id, send_cq) O(rdma_cm_id, recv_cq_channel)
  O(rdma_cm_id, recv_cq) O(rdma_cm_id, srq) O(rdma_cm_id, pd) O(rdma_cm_id, qp_type)
  O(rdma_conn_param, private_data_len) O(rdma_conn_param, qp_num)
  O(rdma_ud_param, ah_attr) O(rdma_ud_param, qp_num) O(rdma_ud_param, qkey)
  O(rdma_cm_event, listen_id) O(rdma_cm_event, event) O(rdma_cm_event, status)
  O(rdma_cm_event, param)
  O(rdma_addrinfo, ai_src_addr) O(rdma_addrinfo, ai_dst_addr) O(rdma_addrinfo, ai_next)
  return 0;
}
"#;

#[test]
fn the_structs_match_the_system_header() {
    let test = "the_structs_match_the_system_header";
    if !std::path::Path::new("/usr/include/rdma/rdma_cma.h").is_file() {
        return gate::skip(test, "librdmacm-dev", "rdma/rdma_cma.h is not installed");
    }
    let dir = std::env::temp_dir().join(format!("vqp-rdmacm-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, exe) = (dir.join("probe.c"), dir.join("probe"));
    std::fs::write(&src, PROBE).unwrap();
    let built = Command::new("gcc").arg("-o").arg(&exe).arg(&src).status();
    if !built.is_ok_and(|s| s.success()) {
        let _ = std::fs::remove_dir_all(&dir);
        return gate::skip(test, "gcc", "gcc cannot compile the probe");
    }
    let out = Command::new(&exe).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8(out.stdout).unwrap();
    let c: std::collections::BTreeMap<&str, usize> = text
        .lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap();
            (k, v.parse().unwrap())
        })
        .collect();
    let ours: &[(&str, usize)] = &[
        ("ibv_sa_path_rec", size_of::<ibv_sa_path_rec>()),
        ("rdma_addr", size_of::<rdma_addr>()),
        ("rdma_route", size_of::<rdma_route>()),
        ("rdma_cm_id", size_of::<rdma_cm_id>()),
        ("rdma_conn_param", size_of::<rdma_conn_param>()),
        ("rdma_ud_param", size_of::<rdma_ud_param>()),
        ("rdma_cm_event", size_of::<rdma_cm_event>()),
        ("rdma_addrinfo", size_of::<rdma_addrinfo>()),
        ("rdma_event_channel", size_of::<rdma_event_channel>()),
        ("ibv_sa_path_rec.dlid", offset_of!(ibv_sa_path_rec, dlid)),
        ("ibv_sa_path_rec.pkey", offset_of!(ibv_sa_path_rec, pkey)),
        ("ibv_sa_path_rec.mtu", offset_of!(ibv_sa_path_rec, mtu)),
        (
            "ibv_sa_path_rec.packet_life_time",
            offset_of!(ibv_sa_path_rec, packet_life_time),
        ),
        ("rdma_addr.dst_addr", offset_of!(rdma_addr, dst)),
        ("rdma_addr.addr", offset_of!(rdma_addr, ibaddr)),
        ("rdma_route.path_rec", offset_of!(rdma_route, path_rec)),
        ("rdma_route.num_paths", offset_of!(rdma_route, num_paths)),
        ("rdma_cm_id.verbs", offset_of!(rdma_cm_id, verbs)),
        ("rdma_cm_id.channel", offset_of!(rdma_cm_id, channel)),
        ("rdma_cm_id.context", offset_of!(rdma_cm_id, context)),
        ("rdma_cm_id.qp", offset_of!(rdma_cm_id, qp)),
        ("rdma_cm_id.route", offset_of!(rdma_cm_id, route)),
        ("rdma_cm_id.ps", offset_of!(rdma_cm_id, ps)),
        ("rdma_cm_id.port_num", offset_of!(rdma_cm_id, port_num)),
        ("rdma_cm_id.event", offset_of!(rdma_cm_id, event)),
        (
            "rdma_cm_id.send_cq_channel",
            offset_of!(rdma_cm_id, send_cq_channel),
        ),
        ("rdma_cm_id.send_cq", offset_of!(rdma_cm_id, send_cq)),
        (
            "rdma_cm_id.recv_cq_channel",
            offset_of!(rdma_cm_id, recv_cq_channel),
        ),
        ("rdma_cm_id.recv_cq", offset_of!(rdma_cm_id, recv_cq)),
        ("rdma_cm_id.srq", offset_of!(rdma_cm_id, srq)),
        ("rdma_cm_id.pd", offset_of!(rdma_cm_id, pd)),
        ("rdma_cm_id.qp_type", offset_of!(rdma_cm_id, qp_type)),
        (
            "rdma_conn_param.private_data_len",
            offset_of!(rdma_conn_param, private_data_len),
        ),
        (
            "rdma_conn_param.qp_num",
            offset_of!(rdma_conn_param, qp_num),
        ),
        ("rdma_ud_param.ah_attr", offset_of!(rdma_ud_param, ah_attr)),
        ("rdma_ud_param.qp_num", offset_of!(rdma_ud_param, qp_num)),
        ("rdma_ud_param.qkey", offset_of!(rdma_ud_param, qkey)),
        (
            "rdma_cm_event.listen_id",
            offset_of!(rdma_cm_event, listen_id),
        ),
        ("rdma_cm_event.event", offset_of!(rdma_cm_event, event)),
        ("rdma_cm_event.status", offset_of!(rdma_cm_event, status)),
        ("rdma_cm_event.param", offset_of!(rdma_cm_event, param)),
        (
            "rdma_addrinfo.ai_src_addr",
            offset_of!(rdma_addrinfo, ai_src_addr),
        ),
        (
            "rdma_addrinfo.ai_dst_addr",
            offset_of!(rdma_addrinfo, ai_dst_addr),
        ),
        ("rdma_addrinfo.ai_next", offset_of!(rdma_addrinfo, ai_next)),
    ];
    assert_eq!(c.len(), ours.len(), "{text}");
    for (k, v) in ours {
        assert_eq!(c.get(k), Some(v), "{k}");
    }
}
