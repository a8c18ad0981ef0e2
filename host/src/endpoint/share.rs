//! Endpoints that share their CQs, so that their virtual QPs share one virtual CQ and
//! one poll thread: create each with the same CQs ([`Endpoint::create_with_cqs`]),
//! build one virtual CQ over them, and connect each into it
//! ([`Endpoint::connect_into`]). A virtual QP may use a subset of the devices (an
//! endpoint over the first `k` of the CQs).

use vqp_core::{VirtualCq, VirtualQp};

use super::Endpoint;
use crate::error::{Error, Result};
use crate::provider::{VerbsCq, VerbsQp};
use crate::verbs::{CompletionQueue, ProtectionDomain};
use crate::Card;

use super::Settings;

impl<
        const N: usize,
        const D: usize,
        const S: usize,
        const W: usize,
        const DEVS: usize,
        const B: usize,
    > Endpoint<N, D, S, W, DEVS, B>
{
    /// As [`Endpoint::create_on`], with the CQs given (`cqs[d]` of `pds[d]`'s device)
    /// instead of new ones. Each must hold what every virtual QP attached to it can
    /// have outstanding (checked as each is attached).
    ///
    /// # Errors
    /// As [`Endpoint::create_on`]; [`Error::InvalidArgument`] for another number of CQs
    /// than PDs or a CQ of another device context than its PD's.
    pub fn create_with_cqs(
        pds: &[&ProtectionDomain],
        settings: &Settings,
        cqs: &[&CompletionQueue],
    ) -> Result<Self> {
        if cqs.len() != pds.len() {
            return Err(Error::InvalidArgument {
                what: "give one CQ per protection domain",
            });
        }
        if pds
            .iter()
            .zip(cqs)
            .any(|(pd, cq)| !std::sync::Arc::ptr_eq(&pd.inner.ctx, &cq.inner.ctx))
        {
            return Err(Error::InvalidArgument {
                what: "a CQ of another device context than its protection domain's",
            });
        }
        Self::build(pds, settings, |d, _, _| Ok(cqs[d].clone()))
    }

    /// Connects to `peer` as [`Endpoint::connect`] does, attaching the virtual QP to
    /// `vcq`, which must poll this endpoint's CQs at its device indices (device `d` of
    /// the endpoint is device `d` of `vcq`). Poll `vcq` with the virtual QPs in the
    /// order they were attached.
    ///
    /// # Errors
    /// As [`Endpoint::connect`]; [`Error::InvalidArgument`] when `vcq` does not poll
    /// this endpoint's CQs at those indices; [`Error::Cq`] when a CQ is too small for
    /// one more virtual QP.
    pub fn connect_into(
        self,
        peer: &Card,
        vcq: &mut VirtualCq<VerbsCq, DEVS, B>,
    ) -> Result<VirtualQp<VerbsQp, N, D, S, W>> {
        for (d, dev) in self.devices.iter().enumerate() {
            let polled = vcq.cq_mut(d as u8).map(|c| c.cq().as_raw());
            if polled != Some(dev.cq.as_raw()) {
                return Err(Error::InvalidArgument {
                    what: "the virtual CQ does not poll this endpoint's CQ at its device index",
                });
            }
        }
        let (vqp, (), _) = self.connect_with(peer, |vqp, _| {
            vcq.attach(vqp)?;
            Ok(())
        })?;
        Ok(vqp)
    }
}
