//! Python-compatible text forms of template values: `json.dumps(...)` (what HF's `tojson` filter
//! calls), `repr(float)`, and `str(x)` (what Jinja2 prints for `{{ x }}`).

use minijinja::value::{Value, ValueKind};
use minijinja::{Error, ErrorKind};
use std::fmt::Write;

/// Options of Python's `json.dumps` that HF's `tojson` filter exposes.
#[derive(Clone, Debug)]
pub struct JsonOptions {
    pub ensure_ascii: bool,
    /// `None`: single line. `Some(s)`: newline, then `s` repeated once per nesting level.
    pub indent: Option<String>,
    pub item_separator: String,
    pub key_separator: String,
    pub sort_keys: bool,
}

impl JsonOptions {
    /// Python's defaults: `(', ', ': ')` on one line, `(',', ': ')` when indenting.
    pub fn new(indent: Option<String>) -> JsonOptions {
        let item_separator = if indent.is_some() { "," } else { ", " };
        JsonOptions {
            ensure_ascii: false,
            indent,
            item_separator: item_separator.to_string(),
            key_separator: ": ".to_string(),
            sort_keys: false,
        }
    }
}

/// `json.dumps(value, ...)` with the given options.
pub fn json_dumps(value: &Value, options: &JsonOptions) -> Result<String, Error> {
    let mut out = String::new();
    write_json(&mut out, value, options, 0)?;
    Ok(out)
}

fn write_json(
    out: &mut String,
    value: &Value,
    opts: &JsonOptions,
    depth: usize,
) -> Result<(), Error> {
    match value.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => out.push_str(&json_number(value)),
        ValueKind::String => {
            write_json_string(out, value.as_str().unwrap_or_default(), opts.ensure_ascii)
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            write_json_container(out, ('[', ']'), items.len(), opts, depth, |out, i| {
                write_json(out, &items[i], opts, depth + 1)
            })?;
        }
        ValueKind::Map => {
            let mut entries = map_entries(value)?;
            if opts.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(&b.0));
            }
            write_json_container(out, ('{', '}'), entries.len(), opts, depth, |out, i| {
                let (key, item) = &entries[i];
                write_json_string(out, key, opts.ensure_ascii);
                out.push_str(&opts.key_separator);
                write_json(out, item, opts, depth + 1)
            })?;
        }
        kind => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("Object of type {kind} is not JSON serializable"),
            ))
        }
    }
    Ok(())
}

fn write_json_container(
    out: &mut String,
    (open, close): (char, char),
    len: usize,
    opts: &JsonOptions,
    depth: usize,
    mut write_item: impl FnMut(&mut String, usize) -> Result<(), Error>,
) -> Result<(), Error> {
    out.push(open);
    if len == 0 {
        out.push(close);
        return Ok(());
    }
    for i in 0..len {
        if i > 0 {
            out.push_str(&opts.item_separator);
        }
        push_newline_indent(out, opts, depth + 1);
        write_item(out, i)?;
    }
    push_newline_indent(out, opts, depth);
    out.push(close);
    Ok(())
}

fn push_newline_indent(out: &mut String, opts: &JsonOptions, depth: usize) {
    if let Some(indent) = &opts.indent {
        out.push('\n');
        for _ in 0..depth {
            out.push_str(indent);
        }
    }
}

/// Map entries with keys coerced the way `json.dumps` does (str, int, float, bool, None).
fn map_entries(value: &Value) -> Result<Vec<(String, Value)>, Error> {
    let mut entries = Vec::new();
    for key in value.try_iter()? {
        let item = value.get_item(&key)?;
        let key_text = match key.kind() {
            ValueKind::String => key.as_str().unwrap_or_default().to_string(),
            ValueKind::None | ValueKind::Bool | ValueKind::Number => {
                json_dumps(&key, &JsonOptions::new(None))?
            }
            kind => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("keys must be str, int, float, bool or None, not {kind}"),
                ))
            }
        };
        entries.push((key_text, item));
    }
    Ok(entries)
}

fn json_number(value: &Value) -> String {
    if value.is_integer() {
        return value.to_string();
    }
    match f64::try_from(value.clone()) {
        Ok(f) if f.is_nan() => "NaN".to_string(),
        Ok(f) if f.is_infinite() => if f > 0.0 { "Infinity" } else { "-Infinity" }.to_string(),
        Ok(f) => float_repr(f),
        Err(_) => value.to_string(),
    }
}

/// The string escaping of Python's json encoder (`ensure_ascii` picks the ASCII-only variant).
fn write_json_string(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => push_u_escape(out, c as u32),
            c if ensure_ascii && !c.is_ascii() => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    push_u_escape(out, u32::from(*unit));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn push_u_escape(out: &mut String, unit: u32) {
    let _ = write!(out, "\\u{unit:04x}");
}

/// Python's `repr(float)`: shortest round-trip digits, scientific outside `1e-4 <= |x| < 1e16`.
pub fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    // Rust's `{:e}` yields the shortest round-trip digits, e.g. "-1.25e-7".
    let sci = format!("{f:e}");
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    // Python's `decpt`: the value is 0.DIGITS x 10^decpt.
    let decpt = exponent + 1;
    if f == 0.0 || (-4 < decpt && decpt <= 16) {
        return format!("{sign}{}", fixed_notation(&digits, decpt));
    }
    let (first, rest) = digits.split_at(1);
    let fraction = if rest.is_empty() {
        String::new()
    } else {
        format!(".{rest}")
    };
    let exp_sign = if exponent < 0 { '-' } else { '+' };
    format!("{sign}{first}{fraction}e{exp_sign}{:02}", exponent.abs())
}

fn fixed_notation(digits: &str, decpt: i32) -> String {
    if decpt <= 0 {
        return format!("0.{}{digits}", "0".repeat(decpt.unsigned_abs() as usize));
    }
    let point = decpt as usize;
    if digits.len() <= point {
        format!("{digits}{}.0", "0".repeat(point - digits.len()))
    } else {
        format!("{}.{}", &digits[..point], &digits[point..])
    }
}

/// Python's `str(x)`, which Jinja2 prints for `{{ x }}`: `None`, `True`, `{'a': 1}`, `1e+16`.
pub fn python_str(out: &mut String, value: &Value) -> Result<(), Error> {
    match value.kind() {
        ValueKind::Undefined => {}
        ValueKind::String => out.push_str(value.as_str().unwrap_or_default()),
        _ => python_repr(out, value)?,
    }
    Ok(())
}

/// Python's `repr(x)` for the JSON-like values templates see.
fn python_repr(out: &mut String, value: &Value) -> Result<(), Error> {
    match value.kind() {
        ValueKind::Undefined => out.push_str("Undefined"),
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if value.is_true() { "True" } else { "False" }),
        ValueKind::Number if value.is_integer() => out.push_str(&value.to_string()),
        ValueKind::Number => match f64::try_from(value.clone()) {
            Ok(f) => out.push_str(&float_repr(f)),
            Err(_) => out.push_str(&value.to_string()),
        },
        ValueKind::String => python_string_repr(out, value.as_str().unwrap_or_default()),
        ValueKind::Seq => {
            out.push('[');
            for (i, item) in value.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                python_repr(out, &item)?;
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            for (i, key) in value.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                python_repr(out, &key)?;
                out.push_str(": ");
                python_repr(out, &value.get_item(&key)?)?;
            }
            out.push('}');
        }
        _ => {
            let _ = write!(out, "{value}");
        }
    }
    Ok(())
}

/// `repr(str)`: single quotes unless the text has `'` and no `"`; non-printables escaped.
fn python_string_repr(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if !is_python_printable(c) => {
                let code = c as u32;
                let _ = match code {
                    0..=0xff => write!(out, "\\x{code:02x}"),
                    0x100..=0xffff => write!(out, "\\u{code:04x}"),
                    _ => write!(out, "\\U{code:08x}"),
                };
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// Approximates `str.isprintable`: control, separator (except space) and common format characters.
fn is_python_printable(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    let code = c as u32;
    !(c.is_control()
        || c.is_whitespace()
        || code == 0xad
        || (0x200b..=0x200f).contains(&code)
        || (0x202a..=0x202e).contains(&code)
        || (0x2060..=0x2064).contains(&code)
        || code == 0xfeff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_repr_matches_python() {
        let cases = [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (-2.5, "-2.5"),
            (0.0, "0.0"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (123456789.125, "123456789.125"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (0.30000000000000004, "0.30000000000000004"),
        ];
        for (value, expected) in cases {
            assert_eq!(float_repr(value), expected, "{value:e}");
        }
    }

    #[test]
    fn json_dumps_matches_python_defaults() {
        let value = Value::from_serialize(
            serde_json::json!({"b": [1, 2.0, null], "a": "é\"\n\u{1}", "c": {}}),
        );
        let compact = json_dumps(&value, &JsonOptions::new(None)).unwrap();
        assert_eq!(
            compact,
            r#"{"b": [1, 2.0, null], "a": "é\"\n\u0001", "c": {}}"#
        );
        let mut options = JsonOptions::new(Some("  ".to_string()));
        options.sort_keys = true;
        options.ensure_ascii = true;
        let pretty = json_dumps(&value, &options).unwrap();
        let expected = "{\n  \"a\": \"\\u00e9\\\"\\n\\u0001\",\n  \"b\": [\n    1,\n    2.0,\n    null\n  ],\n  \"c\": {}\n}";
        assert_eq!(pretty, expected);
    }

    #[test]
    fn python_str_of_containers() {
        let value = Value::from_serialize(serde_json::json!({"k": [true, null, "it's", 1.0]}));
        let mut out = String::new();
        python_str(&mut out, &value).unwrap();
        assert_eq!(out, r#"{'k': [True, None, "it's", 1.0]}"#);
    }
}
