//! Placement: from a requirement and the registry's records to the nodes to try, in order.
//!
//! Pure functions, no I/O: [`Requirement`] parses `--requires`, [`choose`] orders the nodes
//! (its documentation is the policy).

mod policy;
mod requirement;
mod size;

#[cfg(test)]
mod properties;

pub use policy::{choose, Candidate};
pub use requirement::{Requirement, RequirementError};
