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
}

impl Right {
    pub const ALL: [Right; 5] = [
        Right::Alloc,
        Right::Write,
        Right::Read,
        Right::Load,
        Right::Launch,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Right::Alloc => "alloc",
            Right::Write => "write",
            Right::Read => "read",
            Right::Load => "load",
            Right::Launch => "launch",
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
    pub const ALL: Rights = Rights(0b1_1111);

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
