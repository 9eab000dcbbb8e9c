//! PTX type words (`.u32`, `.f16`, ...): their sizes, their IR types, and the kind of value an
//! operand of that type holds.

use crate::ir::*;

/// The kind of value an operand position holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum K {
    Int(u8),
    F(FT),
    Pred,
}

pub(super) fn type_size(ty: &str) -> Option<u32> {
    Some(match ty {
        "b8" | "u8" | "s8" | "pred" => 1,
        "b16" | "u16" | "s16" | "f16" | "bf16" => 2,
        "b32" | "u32" | "s32" | "f32" | "f16x2" | "bf16x2" => 4,
        "b64" | "u64" | "s64" | "f64" => 8,
        "b128" => 16,
        _ => return None,
    })
}

pub(super) fn parse_ty(s: &str) -> Option<Ty> {
    Some(match s {
        "b8" | "u8" => Ty::I(IT {
            bits: 8,
            signed: false,
        }),
        "s8" => Ty::I(IT {
            bits: 8,
            signed: true,
        }),
        "b16" | "u16" => Ty::I(IT {
            bits: 16,
            signed: false,
        }),
        "s16" => Ty::I(IT {
            bits: 16,
            signed: true,
        }),
        "b32" | "u32" => Ty::I(IT {
            bits: 32,
            signed: false,
        }),
        "s32" => Ty::I(IT {
            bits: 32,
            signed: true,
        }),
        "b64" | "u64" => Ty::I(IT {
            bits: 64,
            signed: false,
        }),
        "s64" => Ty::I(IT {
            bits: 64,
            signed: true,
        }),
        "f16" => Ty::F(FT::F16),
        "bf16" => Ty::F(FT::BF16),
        "f32" => Ty::F(FT::F32),
        "f64" => Ty::F(FT::F64),
        _ => return None,
    })
}

/// The element format of a packed pair of halves (`.f16x2`, `.bf16x2`).
pub(super) fn packed_half(t: &str) -> Option<FT> {
    match t {
        "f16x2" => Some(FT::F16),
        "bf16x2" => Some(FT::BF16),
        _ => None,
    }
}

pub(super) fn ft_bits(f: FT) -> u8 {
    match f {
        FT::F16 | FT::BF16 => 16,
        FT::F32 => 32,
        FT::F64 => 64,
    }
}

pub(super) fn kind_of(t: Ty) -> K {
    match t {
        Ty::I(i) => K::Int(i.bits),
        Ty::F(f) => K::F(f),
    }
}
