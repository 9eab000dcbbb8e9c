//! Reading a tasklet's input bytes in the shapes `run` functions usually take them: text, one
//! count, a list of numbers, or a command with a numeric argument.
//!
//! Every error is [`Error::InvalidInput`] and quotes the word that did not parse, so that the
//! caller of a tasklet sees which part of its input was wrong.
//!
//! ```
//! use tasklet_gpu::input;
//!
//! assert_eq!(input::count_or(b" 12\n", 256), Ok(12));
//! assert_eq!(input::count_or(b"", 256), Ok(256));
//! assert_eq!(input::numbers::<f32>(b"2 1.5 -3"), Ok(vec![2.0, 1.5, -3.0]));
//! assert_eq!(
//!     input::count_or(b"ten", 256).unwrap_err().to_string(),
//!     "invalid-input: \"ten\" is not an element count from 0 to 4294967295",
//! );
//! ```

use core::str::FromStr;

use crate::error::{Error, Result};

/// The input as UTF-8 text.
pub fn text(input: &[u8]) -> Result<&str> {
    core::str::from_utf8(input)
        .map_err(|e| Error::invalid_input(format!("the input is not UTF-8 ({e})")))
}

/// One word parsed as a `T`; `expected` says what it should have been (`"a number"`), for the
/// error.
pub fn parse<T: FromStr>(word: &str, expected: &str) -> Result<T> {
    word.parse()
        .map_err(|_| Error::invalid_input(format!("{word:?} is not {expected}")))
}

/// The whole input as one decimal element count, or `default` when it is empty or whitespace.
pub fn count_or(input: &[u8], default: u32) -> Result<u32> {
    let text = text(input)?.trim();
    if text.is_empty() {
        return Ok(default);
    }
    parse(text, &format!("an element count from 0 to {}", u32::MAX))
}

/// The input as whitespace-separated numbers (any number of them, none included).
pub fn numbers<T: FromStr>(input: &[u8]) -> Result<Vec<T>> {
    text(input)?
        .split_whitespace()
        .map(|word| parse(word, "a number"))
        .collect()
}

/// The numeric argument of a `<command> <argument>` input, `None` when the input had no word
/// after the command.
///
/// ```
/// use tasklet_gpu::input;
///
/// let mut words = input::text(b"hold 20")?.split_whitespace();
/// let command = words.next().unwrap_or("");
/// assert_eq!(input::argument::<u32>(command, words.next())?, 20);
/// assert!(input::argument::<u32>("hold", None).is_err());
/// # Ok::<(), tasklet_gpu::Error>(())
/// ```
pub fn argument<T: FromStr>(command: &str, argument: Option<&str>) -> Result<T> {
    let word = argument
        .ok_or_else(|| Error::invalid_input(format!("{command} needs a number argument")))?;
    parse(word, "a number").map_err(|e| Error::invalid_input(format!("{command}: {}", e.message())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn counts_default_when_blank_and_reject_what_is_not_a_u32() {
        assert_eq!(count_or(b"", 256), Ok(256));
        assert_eq!(count_or(b" \n\t", 256), Ok(256));
        assert_eq!(count_or(b"10\n", 256), Ok(10));
        assert_eq!(count_or(b"0", 256), Ok(0));
        assert!(count_or(b"-1", 256)
            .unwrap_err()
            .message()
            .contains("\"-1\""));
        for bad in [&b"ten"[..], b"1.5", b"4294967296", b"1 2", &[0xff]] {
            let e = count_or(bad, 256).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{bad:?}: {e}");
        }
    }

    #[test]
    fn numbers_split_on_whitespace_and_name_the_bad_word() {
        assert_eq!(
            numbers::<f32>(b"2 1 -1.5\n3e2"),
            Ok(vec![2.0, 1.0, -1.5, 300.0])
        );
        assert_eq!(numbers::<u32>(b"  "), Ok(vec![]));
        let e = numbers::<f32>(b"2 x").unwrap_err();
        assert_eq!(e.to_string(), "invalid-input: \"x\" is not a number");
    }

    #[test]
    fn arguments_name_their_command() {
        assert_eq!(argument::<f64>("hold", Some("0.5")), Ok(0.5));
        let missing = argument::<u32>("leases", None).unwrap_err();
        assert_eq!(missing.message(), "leases needs a number argument");
        let bad = argument::<u32>("leases", Some("x")).unwrap_err();
        assert_eq!(bad.message(), "leases: \"x\" is not a number");
    }

    #[test]
    fn text_must_be_utf8() {
        assert_eq!(text(b"ok"), Ok("ok"));
        assert!(text(&[0xff])
            .unwrap_err()
            .message()
            .starts_with("the input is not UTF-8"));
    }
}
