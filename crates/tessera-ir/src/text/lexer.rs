//! Tokens of the jaxpr text form, with their line and column.

use super::parse::ParseError;

/// A token.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Tok {
    /// A name or keyword (`a`, `lambda`, `float32`, `True`).
    Ident(String),
    /// A number as written (`-1.0`, `9.9e-06`, `3`, `-inf`).
    Num(String),
    /// One punctuation character: `{ } [ ] ( ) : , ; . =`.
    Punct(char),
    /// The end of the text.
    Eof,
}

/// A token and where it starts (1-based line and column).
#[derive(Clone, Debug)]
pub(crate) struct Spanned {
    pub tok: Tok,
    pub line: usize,
    pub col: usize,
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Splits `text` into tokens.
pub(crate) fn lex(text: &str) -> Result<Vec<Spanned>, ParseError> {
    let chars: Vec<char> = text.chars().collect();
    let (mut i, mut line, mut col) = (0usize, 1usize, 1usize);
    let mut out = Vec::new();
    while i < chars.len() {
        let c = chars[i];
        let (l0, c0) = (line, col);
        let start = i;
        if c == '\n' {
            i += 1;
            line += 1;
            col = 1;
            continue;
        }
        if c.is_whitespace() {
            i += 1;
            col += 1;
            continue;
        }
        let next = chars.get(i + 1).copied().unwrap_or(' ');
        let tok = if c.is_ascii_digit()
            || (c == '-' && (next.is_ascii_digit() || next == 'i' || next == 'n'))
        {
            i += 1;
            while i < chars.len() {
                let d = chars[i];
                let exp_sign = (d == '-' || d == '+') && matches!(chars[i - 1], 'e' | 'E');
                let dot_digit = d == '.' && chars.get(i + 1).is_some_and(|n| n.is_ascii_digit());
                if d.is_ascii_alphanumeric()
                    || exp_sign
                    || (dot_digit && !chars[start..i].contains(&'.'))
                {
                    i += 1;
                } else {
                    break;
                }
            }
            Tok::Num(chars[start..i].iter().collect())
        } else if is_ident_char(c) {
            // Primitive names may hold a hyphen (`scatter-add`).
            while i < chars.len()
                && (is_ident_char(chars[i])
                    || chars[i] == '-' && chars.get(i + 1).is_some_and(|c| c.is_ascii_alphabetic()))
            {
                i += 1;
            }
            Tok::Ident(chars[start..i].iter().collect())
        } else if "{}[]():,;.=".contains(c) {
            i += 1;
            Tok::Punct(c)
        } else {
            return Err(ParseError {
                line,
                col,
                message: format!("unexpected character {c:?}"),
            });
        };
        col += i - start;
        out.push(Spanned {
            tok,
            line: l0,
            col: c0,
        });
    }
    out.push(Spanned {
        tok: Tok::Eof,
        line,
        col,
    });
    Ok(out)
}
