//! An opcode's dotted modifiers (`ld.global.nc.v4.u32`). Each instruction's lowering consumes the
//! modifiers it understands; any left over make the instruction unsupported, so nothing is ever
//! silently ignored.

use super::err;
use super::types::{parse_ty, type_size};
use crate::ir::*;
use crate::LoadError;

/// The modifiers of one opcode; each lowering consumes the ones it understands, and any left
/// over makes the instruction unsupported.
pub(super) struct Mods<'a> {
    pub(super) base: &'a str,
    pub(super) full: &'a str,
    pub(super) list: Vec<&'a str>,
    pub(super) used: Vec<bool>,
    pub(super) line: u32,
}

impl<'a> Mods<'a> {
    pub(super) fn new(full: &'a str, line: u32) -> Self {
        let mut it = full.split('.');
        let base = it.next().unwrap_or("");
        let list: Vec<&str> = it.collect();
        let used = vec![false; list.len()];
        Mods {
            base,
            full,
            list,
            used,
            line,
        }
    }
    pub(super) fn has(&mut self, m: &str) -> bool {
        for (i, x) in self.list.iter().enumerate() {
            if !self.used[i] && *x == m {
                self.used[i] = true;
                return true;
            }
        }
        false
    }
    pub(super) fn one_of(&mut self, opts: &[&'a str]) -> Option<&'a str> {
        for (i, x) in self.list.iter().enumerate() {
            if !self.used[i] && opts.contains(x) {
                self.used[i] = true;
                return Some(x);
            }
        }
        None
    }
    /// Consumes and returns every remaining type modifier, in order.
    pub(super) fn types(&mut self) -> Vec<&'a str> {
        let mut out = Vec::new();
        for (i, x) in self.list.iter().enumerate() {
            if !self.used[i] && (type_size(x).is_some()) {
                self.used[i] = true;
                out.push(*x);
            }
        }
        out
    }
    pub(super) fn one_type(&mut self) -> Result<&'a str, LoadError> {
        let t = self.types();
        match t.as_slice() {
            [x] => Ok(x),
            [] => Err(self.err("missing a type modifier")),
            _ => Err(self.err("too many type modifiers")),
        }
    }
    pub(super) fn rnd(&mut self) -> Option<Rnd> {
        self.one_of(&["rn", "rz", "rm", "rp", "rna"])
            .map(|r| match r {
                "rn" => Rnd::N,
                "rz" => Rnd::Z,
                "rm" => Rnd::M,
                "rp" => Rnd::P,
                _ => Rnd::A,
            })
    }
    pub(super) fn int_rnd(&mut self) -> Option<Rnd> {
        self.one_of(&["rni", "rzi", "rmi", "rpi"]).map(|r| match r {
            "rni" => Rnd::N,
            "rzi" => Rnd::Z,
            "rmi" => Rnd::M,
            _ => Rnd::P,
        })
    }
    /// Memory-ordering, scope and cache qualifiers that do not change single-copy semantics in
    /// the emulator (it runs every access as a relaxed atomic of the access width).
    pub(super) fn ignore_mem_hints(&mut self) {
        for (i, x) in self.list.iter().enumerate() {
            if self.used[i] {
                continue;
            }
            let ignorable = matches!(
                *x,
                "volatile"
                    | "relaxed"
                    | "acquire"
                    | "release"
                    | "acq_rel"
                    | "weak"
                    | "sc"
                    | "mmio"
                    | "cta"
                    | "gpu"
                    | "sys"
                    | "cluster"
                    | "nc"
                    | "ca"
                    | "cg"
                    | "cs"
                    | "lu"
                    | "cv"
                    | "wb"
                    | "wt"
                    | "unified"
            ) || x.starts_with("L1::")
                || x.starts_with("L2::");
            if ignorable {
                self.used[i] = true;
            }
        }
    }
    pub(super) fn err(&self, msg: &str) -> LoadError {
        err(self.line, format!("`{}`: {msg}", self.full))
    }
    pub(super) fn finish(&self) -> Result<(), LoadError> {
        for (i, x) in self.list.iter().enumerate() {
            if !self.used[i] {
                return Err(err(
                    self.line,
                    format!(
                        "unsupported modifier `.{x}` in `{}` (instruction `{}`)",
                        self.full, self.base
                    ),
                ));
            }
        }
        Ok(())
    }

    pub(super) fn space(&mut self) -> Option<Space> {
        self.one_of(&["global", "shared", "local", "param", "const"])
            .map(|s| match s {
                "global" => Space::Global,
                "shared" => Space::Shared,
                "local" => Space::Local,
                "param" => Space::Param,
                _ => Space::Const,
            })
    }

    pub(super) fn int_ty(&self, t: &str) -> Result<IT, LoadError> {
        match parse_ty(t) {
            Some(Ty::I(it)) => Ok(it),
            _ => Err(self.err("needs an integer type")),
        }
    }
}
