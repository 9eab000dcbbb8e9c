//! What a tasklet may do with a lease: the rights a manifest asks for and a policy grants.

use std::fmt;

/// One GPU right. Every session operation needs exactly one (`sync` needs none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Right {
    Alloc,
    Write,
    Read,
    Load,
    Launch,
    /// Launching a persistent kernel: one exempt from the per-kernel deadline (not from its
    /// lease), counted against the grant's `max_persistent`. A manifest gets it only by naming it.
    Persistent,
}

impl Right {
    pub const ALL: [Right; 6] = [
        Right::Alloc,
        Right::Write,
        Right::Read,
        Right::Load,
        Right::Launch,
        Right::Persistent,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Right::Alloc => "alloc",
            Right::Write => "write",
            Right::Read => "read",
            Right::Load => "load",
            Right::Launch => "launch",
            Right::Persistent => "persistent",
        }
    }

    pub fn from_name(name: &str) -> Option<Right> {
        Right::ALL.into_iter().find(|r| r.name() == name)
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A set of rights.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Rights(u8);

impl Rights {
    pub const NONE: Rights = Rights(0);
    /// Every right, `persistent` included: what a policy that does not list `rights` allows (a
    /// manifest has no such default: it gets the rights it names and no others).
    pub const ALL: Rights = Rights(0b11_1111);

    pub fn contains(self, right: Right) -> bool {
        self.0 & right.bit() != 0
    }

    pub fn with(self, right: Right) -> Rights {
        Rights(self.0 | right.bit())
    }

    pub fn intersect(self, other: Rights) -> Rights {
        Rights(self.0 & other.0)
    }

    pub fn iter(self) -> impl Iterator<Item = Right> {
        Right::ALL.into_iter().filter(move |r| self.contains(*r))
    }
}

impl FromIterator<Right> for Rights {
    fn from_iter<I: IntoIterator<Item = Right>>(iter: I) -> Rights {
        iter.into_iter().fold(Rights::NONE, Rights::with)
    }
}

impl fmt::Debug for Rights {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter().map(Right::name)).finish()
    }
}

impl fmt::Display for Rights {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<_> = self.iter().map(Right::name).collect();
        write!(f, "[{}]", names.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_right_has_a_name_and_its_own_bit() {
        for right in Right::ALL {
            assert_eq!(Right::from_name(right.name()), Some(right));
            assert!(Rights::ALL.contains(right), "{}", right.name());
            assert_eq!(Rights::NONE.with(right).iter().collect::<Vec<_>>(), [right]);
        }
        assert_eq!(Rights::ALL, Right::ALL.into_iter().collect());
        assert_eq!(Right::from_name("persistent"), Some(Right::Persistent));
    }

    #[test]
    fn the_usual_five_do_not_include_persistent() {
        let five: Rights = [
            Right::Alloc,
            Right::Write,
            Right::Read,
            Right::Load,
            Right::Launch,
        ]
        .into_iter()
        .collect();
        assert!(!five.contains(Right::Persistent));
        assert!(!five.intersect(Rights::ALL).contains(Right::Persistent));
        assert_eq!(five.to_string(), "[alloc, write, read, load, launch]");
    }
}
