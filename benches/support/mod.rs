//! Shared bench support: a counting allocator and the reference's data structures.
#![allow(dead_code)]

pub mod alloc;
pub mod reference;
