//! The globals, filters and output formatter that transformers' chat-template environment adds
//! on top of plain Jinja2 (see `_compile_jinja_template` in `transformers/utils/chat_template_utils.py`).

use super::pyfmt::{json_dumps, python_str, JsonOptions};
use minijinja::value::{Kwargs, Rest, Value, ValueKind};
use minijinja::{Error, ErrorKind, Output, State};
use std::fmt::Write;

/// Carried as the source of the minijinja error that `raise_exception(msg)` produces, so the
/// caller can tell a deliberate template error from an engine failure.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RaisedByTemplate(pub String);

/// `raise_exception(message)`: aborts rendering with the template's own message.
pub fn raise_exception(message: Value) -> Result<Value, Error> {
    let mut text = String::new();
    python_str(&mut text, &message)?;
    Err(Error::new(ErrorKind::InvalidOperation, text.clone()).with_source(RaisedByTemplate(text)))
}

/// `strftime_now(format)`: the local time formatted with Python/C strftime directives.
pub fn strftime_now(format: &str) -> Result<String, Error> {
    let items = chrono::format::StrftimeItems::new(format)
        .parse()
        .map_err(|err| {
            Error::new(
                ErrorKind::InvalidOperation,
                format!("bad strftime format {format:?}: {err}"),
            )
        })?;
    let mut text = String::new();
    write!(
        text,
        "{}",
        chrono::Local::now().format_with_items(items.iter())
    )
    .map_err(|_| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("cannot format time with {format:?}"),
        )
    })?;
    Ok(text)
}

/// HF's `tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`:
/// Python's `json.dumps` without Jinja's HTML escaping.
pub fn tojson(value: &Value, args: Rest<Value>) -> Result<Value, Error> {
    let mut positional = args.0;
    let kwargs = match positional.last() {
        Some(last) if last.is_kwargs() => Kwargs::try_from(positional.pop().unwrap_or_default())?,
        _ => Kwargs::from_iter(std::iter::empty::<(&str, Value)>()),
    };
    const NAMES: [&str; 4] = ["ensure_ascii", "indent", "separators", "sort_keys"];
    if positional.len() > NAMES.len() {
        return Err(Error::new(
            ErrorKind::TooManyArguments,
            "tojson takes at most 4 arguments",
        ));
    }
    let mut params: [Value; 4] = Default::default();
    for (slot, arg) in params.iter_mut().zip(positional) {
        *slot = arg;
    }
    for (slot, name) in params.iter_mut().zip(NAMES) {
        if let Some(arg) = kwargs.get::<Option<Value>>(name)? {
            *slot = arg;
        }
    }
    kwargs.assert_all_used()?;
    let [ensure_ascii, indent, separators, sort_keys] = params;
    let mut options = JsonOptions::new(indent_text(&indent)?);
    options.ensure_ascii = ensure_ascii.is_true();
    options.sort_keys = sort_keys.is_true();
    if let Some((item, key)) = separator_pair(&separators)? {
        options.item_separator = item;
        options.key_separator = key;
    }
    json_dumps(value, &options).map(Value::from)
}

/// Python's json indent: an int means that many spaces, a string is used as is.
fn indent_text(indent: &Value) -> Result<Option<String>, Error> {
    match indent.kind() {
        ValueKind::Undefined | ValueKind::None => Ok(None),
        ValueKind::String => Ok(indent.as_str().map(str::to_string)),
        ValueKind::Number if indent.is_integer() => {
            let width = indent.as_i64().unwrap_or(0).clamp(0, 1024) as usize;
            Ok(Some(" ".repeat(width)))
        }
        kind => Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("tojson indent cannot be {kind}"),
        )),
    }
}

fn separator_pair(separators: &Value) -> Result<Option<(String, String)>, Error> {
    if separators.is_undefined() || separators.is_none() {
        return Ok(None);
    }
    let parts: Vec<Value> = separators.try_iter()?.collect();
    match parts.as_slice() {
        [item, key] => match (item.as_str(), key.as_str()) {
            (Some(item), Some(key)) => Ok(Some((item.to_string(), key.to_string()))),
            _ => Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson separators must be strings",
            )),
        },
        _ => Err(Error::new(
            ErrorKind::InvalidOperation,
            "tojson separators must be a pair",
        )),
    }
}

/// `x|string`: Python's `str(x)`.
pub fn string_filter(value: &Value) -> Result<Value, Error> {
    let mut text = String::new();
    python_str(&mut text, value)?;
    Ok(Value::from(text))
}

/// Prints `{{ x }}` as Jinja2 does (Python's `str`), with no HTML escaping.
pub fn python_formatter(out: &mut Output, _state: &State, value: &Value) -> Result<(), Error> {
    let write_failed = |_| Error::new(ErrorKind::WriteFailure, "cannot write template output");
    if let Some(text) = value.as_str() {
        return out.write_str(text).map_err(write_failed);
    }
    let mut text = String::new();
    python_str(&mut text, value)?;
    out.write_str(&text).map_err(write_failed)
}
