//! Chat templates rendered the way transformers' apply_chat_template renders them with Jinja2:
//! an environment with trim_blocks and lstrip_blocks, Python's string and dict methods
//! (minijinja-contrib's pycompat), `tojson` with json.dumps' defaults (no HTML escaping,
//! ", " and ": " separators, non-ASCII kept), `raise_exception`, `strftime_now`, Python's
//! way of printing None, booleans, lists and dicts, and `{% generation %}` blocks whose output
//! ranges are reported (transformers' AssistantTracker).

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State};

const TEMPLATE_NAME: &str = "chat_template";
const GENERATION_FILTER: &str = "__trainer_generation";
// Noncharacters: never produced by a template's own text; removed from the output.
const GEN_OPEN: char = '\u{FDD0}';
const GEN_CLOSE: char = '\u{FDD1}';
const RAISED: &str = "raise_exception: ";

pub struct ChatTemplate {
    env: Environment<'static>,
    has_generation: bool,
}

impl ChatTemplate {
    pub fn new(source: &str) -> Result<ChatTemplate, String> {
        let (source, has_generation) = rewrite_generation_tags(source);
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(false);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_formatter(python_formatter);
        env.add_filter("tojson", tojson_filter);
        env.add_filter("attr", attr_filter);
        // Jinja2 turns any value into Python's str() before a string filter.
        env.add_filter("upper", |v: Value| python_str(&v).to_uppercase());
        env.add_filter("lower", |v: Value| python_str(&v).to_lowercase());
        env.add_filter("trim", |v: Value, chars: Option<String>| {
            let s = python_str(&v);
            match chars {
                Some(chars) => s.trim_matches(|c| chars.contains(c)).to_string(),
                None => s.trim().to_string(),
            }
        });
        // Python's idea of iterable and sequence: None, numbers and booleans are neither (Jinja2's
        // Undefined iterates as empty).
        env.add_test("iterable", |v: Value| {
            matches!(
                v.kind(),
                ValueKind::Seq | ValueKind::Map | ValueKind::String | ValueKind::Iterable | ValueKind::Bytes | ValueKind::Undefined
            )
        });
        env.add_test("sequence", |v: Value| {
            matches!(v.kind(), ValueKind::Seq | ValueKind::Map | ValueKind::String | ValueKind::Bytes)
        });
        env.add_filter("string", |v: Value| match v.kind() {
            ValueKind::String => v,
            _ => Value::from(python_str(&v)),
        });
        env.add_filter(GENERATION_FILTER, |s: String| format!("{GEN_OPEN}{s}{GEN_CLOSE}"));
        env.add_function("raise_exception", |message: String| -> Result<Value, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, format!("{RAISED}{message}")))
        });
        env.add_function("strftime_now", |format: String| strftime_now(&format));
        env.add_template_owned(TEMPLATE_NAME, source).map_err(|e| describe(&e))?;
        Ok(ChatTemplate { env, has_generation })
    }

    pub fn has_generation(&self) -> bool {
        self.has_generation
    }

    /// Renders with a JSON object of template variables; returns the text and the byte ranges
    /// of its {% generation %} blocks.
    pub fn render(&self, context_json: &str) -> Result<(String, Vec<(usize, usize)>), String> {
        let mut context: serde_json::Value =
            serde_json::from_str(context_json).map_err(|e| format!("context: not valid JSON ({e})"))?;
        let obj = context.as_object_mut().ok_or("context: must be a JSON object")?;
        if let Some(serde_json::Value::Array(messages)) = obj.get_mut("messages") {
            for message in messages.iter_mut() {
                normalize_message(message);
            }
        }
        let template = self.env.get_template(TEMPLATE_NAME).map_err(|e| describe(&e))?;
        let raw = template.render(Value::from_serialize(&context)).map_err(|e| describe(&e))?;
        Ok(extract_generation_spans(&raw))
    }
}

/// As transformers: keys whose value is None are dropped, then the reasoning of a message is
/// copied under `thinking` (first) and `reasoning_content` (last) from the first non-null of
/// reasoning_content, thinking, reasoning.
fn normalize_message(message: &mut serde_json::Value) {
    let Some(map) = message.as_object_mut() else { return };
    map.retain(|_, v| !v.is_null());
    let reasoning = ["reasoning_content", "thinking", "reasoning"].iter().find_map(|k| map.get(*k).cloned());
    if let Some(reasoning) = reasoning {
        let mut out = serde_json::Map::new();
        out.insert("thinking".to_string(), reasoning.clone());
        for (k, v) in map.iter() {
            if k == "thinking" {
                continue;
            }
            out.insert(k.clone(), v.clone());
        }
        out.insert("reasoning_content".to_string(), reasoning);
        *map = out;
    }
}

fn describe(e: &Error) -> String {
    let detail = e.detail().unwrap_or("");
    if let Some(message) = detail.strip_prefix(RAISED) {
        return format!("chat_template raised an exception: {message}");
    }
    let mut out = format!("chat_template: {}", e.kind());
    if !detail.is_empty() {
        let _ = write!(out, ": {detail}");
    }
    if let Some(line) = e.line() {
        let _ = write!(out, " (template line {line})");
    }
    out
}

/// Rewrites `{% generation %}` / `{% endgeneration %}` into a filter block with the same
/// whitespace control, so trim_blocks and lstrip_blocks treat it as Jinja2 treats the tag.
fn rewrite_generation_tags(source: &str) -> (String, bool) {
    let mut out = String::with_capacity(source.len() + 64);
    let mut found = false;
    let mut rest = source;
    while let Some(pos) = rest.find("{%") {
        out.push_str(&rest[..pos]);
        let tag = &rest[pos..];
        let mut i = 2;
        let bytes = tag.as_bytes();
        if i < bytes.len() && (bytes[i] == b'-' || bytes[i] == b'+') {
            i += 1;
        }
        let ws_start = i;
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let word_start = i;
        while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
            i += 1;
        }
        let word = &tag[word_start..i];
        let replacement = match word {
            "generation" => Some(format!("filter {GENERATION_FILTER}")),
            "endgeneration" => Some("endfilter".to_string()),
            _ => None,
        };
        match replacement {
            Some(r) => {
                found = true;
                out.push_str(&tag[..ws_start]);
                out.push(' ');
                out.push_str(&r);
                rest = &tag[i..];
            }
            None => {
                out.push_str("{%");
                rest = &tag[2..];
            }
        }
    }
    out.push_str(rest);
    (out, found)
}

/// Jinja2's `attr` reads a Python attribute, never a dict key: on the plain dicts and lists a
/// chat template sees it finds nothing (methods aside), so the result is undefined.
fn attr_filter(value: Value, name: String) -> Result<Value, Error> {
    match value.kind() {
        ValueKind::Map | ValueKind::Seq | ValueKind::String => Ok(Value::UNDEFINED),
        _ => value.get_attr(&name),
    }
}

/// Removes the generation sentinels; returns the text and the byte ranges they enclosed.
fn extract_generation_spans(raw: &str) -> (String, Vec<(usize, usize)>) {
    if !raw.contains(GEN_OPEN) {
        return (raw.to_string(), Vec::new());
    }
    let mut out = String::with_capacity(raw.len());
    let mut spans = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    for c in raw.chars() {
        match c {
            GEN_OPEN => open.push(out.len()),
            GEN_CLOSE => {
                if let Some(start) = open.pop() {
                    // Nested blocks report only the outermost, as transformers' tracker would
                    // report both; keep every one in order of closing like Jinja2's caller().
                    spans.push((start, out.len()));
                }
            }
            _ => out.push(c),
        }
    }
    spans.sort();
    (out, spans)
}

// ---------------------------------------------------------------------------------------------
// Python printing

/// Prints values as Jinja2 does (Python's str()): None, True, False, repr of lists and dicts.
fn python_formatter(out: &mut minijinja::Output, _state: &State, value: &Value) -> Result<(), Error> {
    let text = match value.kind() {
        ValueKind::Undefined => String::new(),
        ValueKind::String => value.as_str().unwrap_or("").to_string(),
        _ => python_str(value),
    };
    out.write_str(&text).map_err(|_| Error::new(ErrorKind::WriteFailure, "cannot write output"))
}

fn python_str(value: &Value) -> String {
    match value.kind() {
        ValueKind::Undefined => String::new(),
        ValueKind::None => "None".to_string(),
        ValueKind::Bool => if value.is_true() { "True" } else { "False" }.to_string(),
        ValueKind::Number => python_number(value),
        ValueKind::String => value.as_str().unwrap_or("").to_string(),
        ValueKind::Seq | ValueKind::Map | ValueKind::Iterable => python_repr(value),
        _ => value.to_string(),
    }
}

fn python_number(value: &Value) -> String {
    if value.is_integer() {
        value.to_string()
    } else {
        match f64::try_from(value.clone()) {
            Ok(f) => python_float(f),
            Err(_) => value.to_string(),
        }
    }
}

fn python_repr(value: &Value) -> String {
    match value.kind() {
        ValueKind::String => python_str_repr(value.as_str().unwrap_or("")),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<String> = match value.try_iter() {
                Ok(it) => it.map(|v| python_repr(&v)).collect(),
                Err(_) => Vec::new(),
            };
            format!("[{}]", items.join(", "))
        }
        ValueKind::Map => {
            let mut items = Vec::new();
            if let Ok(keys) = value.try_iter() {
                for key in keys {
                    let item = value.get_item(&key).unwrap_or(Value::UNDEFINED);
                    items.push(format!("{}: {}", python_repr(&key), python_repr(&item)));
                }
            }
            format!("{{{}}}", items.join(", "))
        }
        _ => python_str(value),
    }
}

/// Python's repr() of a str: single quotes unless the text has ' and no ".
fn python_str_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    let mut out = String::with_capacity(s.len() + 2);
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
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Python's repr() of a float: shortest round-trip digits, exponent form outside [1e-4, 1e16).
fn python_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.to_string();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0" } else { "0.0" }.to_string();
    }
    let sci = format!("{:e}", f); // e.g. "-1.2345e-7", "1e20"
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let sign = if negative { "-" } else { "" };
    if (-4..16).contains(&exp) {
        let point = exp + 1; // digits before the decimal point
        let body = if point <= 0 {
            format!("0.{}{}", "0".repeat((-point) as usize), digits)
        } else if point as usize >= digits.len() {
            format!("{}{}.0", digits, "0".repeat(point as usize - digits.len()))
        } else {
            format!("{}.{}", &digits[..point as usize], &digits[point as usize..])
        };
        format!("{sign}{body}")
    } else {
        let m = if digits.len() > 1 { format!("{}.{}", &digits[..1], &digits[1..]) } else { digits.clone() };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{m}e{esign}{:02}", exp.abs())
    }
}

// ---------------------------------------------------------------------------------------------
// tojson as transformers defines it: json.dumps(x, ensure_ascii=False, indent=None,
// separators=None, sort_keys=False)

struct JsonStyle {
    ensure_ascii: bool,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
}

fn tojson_filter(value: Value, args: minijinja::value::Rest<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    // Positional arguments follow json.dumps' order after the value: ensure_ascii, indent, ...
    let mut ensure_ascii = args.first().map(|v| v.is_true()).unwrap_or(false);
    let mut indent_value = args.get(1).cloned().unwrap_or(Value::from(()));
    let mut separators = args.get(2).cloned().unwrap_or(Value::from(()));
    let mut sort_keys = args.get(3).map(|v| v.is_true()).unwrap_or(false);
    if let Some(v) = kwargs.get::<Option<Value>>("ensure_ascii")? {
        ensure_ascii = v.is_true();
    }
    if let Some(v) = kwargs.get::<Option<Value>>("indent")? {
        indent_value = v;
    }
    if let Some(v) = kwargs.get::<Option<Value>>("separators")? {
        separators = v;
    }
    if let Some(v) = kwargs.get::<Option<Value>>("sort_keys")? {
        sort_keys = v.is_true();
    }
    kwargs.assert_all_used()?;
    let indent = match indent_value.kind() {
        ValueKind::None | ValueKind::Undefined => None,
        ValueKind::String => Some(indent_value.as_str().unwrap_or("").to_string()),
        ValueKind::Number => Some(" ".repeat(indent_value.as_i64().unwrap_or(0).max(0) as usize)),
        _ => return Err(Error::new(ErrorKind::InvalidOperation, "tojson: indent must be an integer or a string")),
    };
    let (item_sep, key_sep) = if separators.kind() == ValueKind::Seq && separators.len() == Some(2) {
        let a = separators.get_item_by_index(0)?;
        let b = separators.get_item_by_index(1)?;
        (a.as_str().unwrap_or(",").to_string(), b.as_str().unwrap_or(":").to_string())
    } else if indent.is_some() {
        (",".to_string(), ": ".to_string())
    } else {
        (", ".to_string(), ": ".to_string())
    };
    let style = JsonStyle { ensure_ascii, indent, item_sep, key_sep, sort_keys };
    let mut out = String::new();
    write_json(&mut out, &value, &style, 0)?;
    Ok(Value::from(out))
}

fn write_json(out: &mut String, value: &Value, style: &JsonStyle, depth: usize) -> Result<(), Error> {
    match value.kind() {
        ValueKind::Undefined => {
            return Err(Error::new(ErrorKind::InvalidOperation, "tojson: Object of type Undefined is not JSON serializable"))
        }
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => out.push_str(&python_number(value)),
        ValueKind::String => write_json_str(out, value.as_str().unwrap_or(""), style.ensure_ascii),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&style.item_sep);
                }
                newline_indent(out, style, depth + 1);
                write_json(out, item, style, depth + 1)?;
            }
            newline_indent(out, style, depth);
            out.push(']');
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = value.try_iter()?.collect();
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            if style.sort_keys {
                keys.sort_by_key(json_key);
            }
            out.push('{');
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(&style.item_sep);
                }
                newline_indent(out, style, depth + 1);
                write_json_str(out, &json_key(key), style.ensure_ascii);
                out.push_str(&style.key_sep);
                write_json(out, &value.get_item(key)?, style, depth + 1)?;
            }
            newline_indent(out, style, depth);
            out.push('}');
        }
        _ => write_json_str(out, &value.to_string(), style.ensure_ascii),
    }
    Ok(())
}

/// A dict key as json.dumps writes it: strings as is, None/True/False as null/true/false.
fn json_key(key: &Value) -> String {
    match key.kind() {
        ValueKind::String => key.as_str().unwrap_or("").to_string(),
        ValueKind::None => "null".to_string(),
        ValueKind::Bool => if key.is_true() { "true" } else { "false" }.to_string(),
        ValueKind::Number => python_number(key),
        _ => key.to_string(),
    }
}

fn newline_indent(out: &mut String, style: &JsonStyle, depth: usize) {
    if let Some(indent) = &style.indent {
        out.push('\n');
        for _ in 0..depth {
            out.push_str(indent);
        }
    }
}

fn write_json_str(out: &mut String, s: &str, ensure_ascii: bool) {
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
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{:04x}", unit);
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

// ---------------------------------------------------------------------------------------------
// strftime_now: datetime.now().strftime(format) for the common directives, in UTC.

fn strftime_now(format: &str) -> Result<String, Error> {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    Ok(strftime(format, secs))
}

const MONTHS: [&str; 12] =
    ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"];
const WEEKDAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];

/// Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn strftime(format: &str, secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute, second) = (rem / 3600, (rem % 3600) / 60, rem % 60);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
    let is_leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let cumulative = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = cumulative[(month - 1) as usize] + day as i64 + if is_leap && month > 2 { 1 } else { 0 };
    let mut out = String::new();
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut flag_no_pad = false;
        let mut spec = chars.next();
        if spec == Some('-') {
            flag_no_pad = true;
            spec = chars.next();
        }
        let pad2 = |v: i64| if flag_no_pad { v.to_string() } else { format!("{v:02}") };
        match spec {
            Some('d') => out.push_str(&pad2(day as i64)),
            Some('e') => out.push_str(&format!("{day:2}")),
            Some('m') => out.push_str(&pad2(month as i64)),
            Some('Y') => out.push_str(&year.to_string()),
            Some('y') => out.push_str(&pad2(year.rem_euclid(100))),
            Some('b') | Some('h') => out.push_str(&MONTHS[(month - 1) as usize][..3]),
            Some('B') => out.push_str(MONTHS[(month - 1) as usize]),
            Some('a') => out.push_str(&WEEKDAYS[weekday][..3]),
            Some('A') => out.push_str(WEEKDAYS[weekday]),
            Some('H') => out.push_str(&pad2(hour)),
            Some('I') => out.push_str(&pad2(if hour % 12 == 0 { 12 } else { hour % 12 })),
            Some('p') => out.push_str(if hour < 12 { "AM" } else { "PM" }),
            Some('M') => out.push_str(&pad2(minute)),
            Some('S') => out.push_str(&pad2(second)),
            Some('j') => out.push_str(&if flag_no_pad { yday.to_string() } else { format!("{yday:03}") }),
            Some('F') => out.push_str(&format!("{year}-{month:02}-{day:02}")),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                if flag_no_pad {
                    out.push('-');
                }
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_like_python() {
        assert_eq!(python_float(1.0), "1.0");
        assert_eq!(python_float(0.1), "0.1");
        assert_eq!(python_float(1e20), "1e+20");
        assert_eq!(python_float(1e-5), "1e-05");
        assert_eq!(python_float(123.456), "123.456");
        assert_eq!(python_float(1e16), "1e+16");
        assert_eq!(python_float(1234567890123456.0), "1234567890123456.0");
        assert_eq!(python_float(0.0001), "0.0001");
        assert_eq!(python_float(-2.5e-7), "-2.5e-07");
    }

    #[test]
    fn dates() {
        assert_eq!(strftime("%d %b %Y", 0), "01 Jan 1970");
        assert_eq!(strftime("%Y-%m-%d %A %j", 951_782_400), "2000-02-29 Tuesday 060");
    }

    #[test]
    fn generation_tags_become_filter_blocks() {
        let (s, found) = rewrite_generation_tags("a{%- generation -%}b{% endgeneration %}c{% if x %}{% endif %}");
        assert!(found);
        assert_eq!(s, "a{%- filter __trainer_generation -%}b{% endfilter %}c{% if x %}{% endif %}");
    }
}
