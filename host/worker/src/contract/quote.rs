//! How much of what a tenant sent an error message may repeat. Kernel names come from the
//! tenant's module, and parser messages, driver JIT logs and NVRTC logs quote its PTX or source;
//! any of them can be a megabyte long. Every message that repeats them goes through [`name`]
//! (for a name, [`NAME_MAX`] bytes of it) or [`text`] (for a message or log built around the
//! tenant's text, [`TEXT_MAX`] bytes of it), so that no error echoes more than that, and each
//! says how long the whole was when it cuts it.

use std::fmt;

/// Most bytes of a name an error quotes.
pub const NAME_MAX: usize = 64;

/// Most bytes of a message or log built around a tenant's text that an error carries.
pub const TEXT_MAX: usize = 200;

/// `name` in backticks, cut to [`NAME_MAX`] bytes (`` `abc…` (100000 bytes) ``), control
/// characters escaped.
pub fn name(name: &str) -> Quoted<'_> {
    Quoted {
        text: name,
        max: NAME_MAX,
        backticks: true,
    }
}

/// `text` as it is, cut to [`TEXT_MAX`] bytes (`abc… (100000 bytes in all)`); newlines and
/// tabs kept (logs have lines), other control characters escaped.
pub fn text(text: &str) -> Quoted<'_> {
    Quoted {
        text,
        max: TEXT_MAX,
        backticks: false,
    }
}

/// A bounded quotation, written by its `Display`.
#[derive(Debug, Clone, Copy)]
pub struct Quoted<'a> {
    text: &'a str,
    max: usize,
    backticks: bool,
}

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut end = self.text.len().min(self.max);
        while !self.text.is_char_boundary(end) {
            end -= 1;
        }
        let tick = if self.backticks { "`" } else { "" };
        f.write_str(tick)?;
        for c in self.text[..end].chars() {
            let kept = !self.backticks && matches!(c, '\n' | '\t');
            if c.is_control() && !kept {
                write!(f, "{}", c.escape_default())?;
            } else {
                write!(f, "{c}")?;
            }
        }
        if end < self.text.len() {
            let all = if self.backticks { "" } else { " in all" };
            write!(f, "…{tick} ({} bytes{all})", self.text.len())
        } else {
            f.write_str(tick)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_and_texts_are_whole() {
        assert_eq!(name("iota").to_string(), "`iota`");
        assert_eq!(
            text("line 3: bad\nline 4").to_string(),
            "line 3: bad\nline 4"
        );
        assert_eq!(name("a\0b").to_string(), "`a\\u{0}b`");
        assert_eq!(text("a\u{1b}b\n").to_string(), "a\\u{1b}b\n");
    }

    #[test]
    fn long_ones_are_cut_on_a_character_boundary_with_their_length() {
        let long = "é".repeat(50_000);
        let n = name(&long).to_string();
        assert!(
            n.starts_with("`éé") && n.ends_with("…` (100000 bytes)"),
            "{n}"
        );
        assert!(n.len() <= NAME_MAX + 24, "{}", n.len());
        let t = text(&long).to_string();
        assert!(t.ends_with("… (100000 bytes in all)"), "{t}");
        assert!(t.len() <= TEXT_MAX + 32, "{}", t.len());
        // Exactly at the bound: whole.
        let edge = "x".repeat(NAME_MAX);
        assert_eq!(name(&edge).to_string(), format!("`{edge}`"));
    }
}
