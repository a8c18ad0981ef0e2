//! Shared bench support: a counting allocator, the reference's data structures and the
//! engine's bench rig.
#![allow(dead_code)]

pub mod alloc;
pub mod reference;
pub mod rig;
