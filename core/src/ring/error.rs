//! One error type per ring operation.

use core::fmt;

/// Why [`Producer::push`](super::Producer::push) did not store a value.
///
/// The value is handed back, so a full ring never loses an item: the caller can retry,
/// park it, or report backpressure.
///
/// ```
/// use vqp_core::ring::{PushError, Ring};
///
/// let mut ring = Ring::<u32, 1>::new();
/// let (mut tx, _rx) = ring.split();
/// tx.push(1).unwrap();
/// assert_eq!(tx.push(2), Err(PushError::Full(2)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PushError<T> {
    /// Every slot of the ring holds an item that the consumer has not handed back yet
    /// (see [`Producer::slots`](super::Producer::slots) for when it does).
    Full(T),
}

impl<T> PushError<T> {
    /// Returns the value that could not be pushed.
    #[inline]
    pub fn into_inner(self) -> T {
        match self {
            Self::Full(value) => value,
        }
    }
}

impl<T> fmt::Display for PushError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full(_) => f.write_str("ring is full"),
        }
    }
}

impl<T: fmt::Debug> core::error::Error for PushError<T> {}

/// Why [`Consumer::pop`](super::Consumer::pop) returned no value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PopError {
    /// The ring holds no item that the producer has published.
    Empty,
}

impl fmt::Display for PopError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("ring is empty"),
        }
    }
}

impl core::error::Error for PopError {}

/// Why [`Ring::try_split`](super::Ring::try_split) handed out no handles: the ring was
/// split through `try_split` before, and its handles may still be alive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SplitError;

impl fmt::Display for SplitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ring was already split into a producer and a consumer")
    }
}

impl core::error::Error for SplitError {}
