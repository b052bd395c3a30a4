//! Tokenizers and chat templates of Hugging Face model folders behind a small C ABI.
//!
//! The C declarations are in `trainer_text.h` next to this crate; the C++ wrapper is
//! src/engine/text/. Conventions of the ABI:
//! - Strings in and out are UTF-8 with an explicit length (no NUL terminator needed).
//! - Every fallible function returns 0 on success and 1 on failure; on failure it fills the
//!   `err` string, which the caller frees with `tt_string_free`.
//! - Buffers handed out (`TtString`, `TtIds`, `TtSpans`) are owned by the caller afterwards and
//!   freed with their `*_free` function. Handles are freed with `tt_tokenizer_free` /
//!   `tt_template_free`.
//! - Panics never cross the boundary: they turn into errors.
//! - Handles are immutable after creation and safe to use from several threads at once.
//!
//! Safety contract of every `unsafe extern "C"` function (the same for all, hence no per-function
//! section): pointers are valid for the lengths given, handles come from this library and are
//! not yet freed, and out-pointers point to writable storage.
#![allow(clippy::missing_safety_doc)]

mod template;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::slice;

use tokenizers::Tokenizer;

/// A byte buffer owned by Rust, handed to C.
#[repr(C)]
pub struct TtString {
    pub ptr: *mut u8,
    pub len: usize,
}

/// Token ids and, optionally, the byte range [begin, end) of the text each came from
/// (`offsets` holds 2 * len values, or is null).
#[repr(C)]
pub struct TtIds {
    pub ids: *mut i32,
    pub offsets: *mut i64,
    pub len: usize,
}

/// Byte ranges [begin, end): `data` holds 2 * len values.
#[repr(C)]
pub struct TtSpans {
    pub data: *mut i64,
    pub len: usize,
}

pub struct TtTokenizer {
    inner: Tokenizer,
}

pub struct TtTemplate {
    inner: template::ChatTemplate,
}

fn empty_string() -> TtString {
    TtString { ptr: ptr::null_mut(), len: 0 }
}

fn to_tt_string(s: String) -> TtString {
    let boxed: Box<[u8]> = s.into_bytes().into_boxed_slice();
    let len = boxed.len();
    let ptr = Box::into_raw(boxed) as *mut u8;
    TtString { ptr, len }
}

fn leak_vec<T>(v: Vec<T>) -> (*mut T, usize) {
    let boxed = v.into_boxed_slice();
    let len = boxed.len();
    (Box::into_raw(boxed) as *mut T, len)
}

unsafe fn free_vec<T>(ptr: *mut T, len: usize) {
    if !ptr.is_null() {
        drop(Box::from_raw(ptr::slice_from_raw_parts_mut(ptr, len)));
    }
}

unsafe fn str_arg<'a>(ptr: *const u8, len: usize, what: &str) -> Result<&'a str, String> {
    if len == 0 {
        return Ok("");
    }
    if ptr.is_null() {
        return Err(format!("{what}: null pointer"));
    }
    std::str::from_utf8(slice::from_raw_parts(ptr, len)).map_err(|e| format!("{what}: not valid UTF-8 ({e})"))
}

/// Runs `f`, turning an error or a panic into 1 and the message in `err`.
fn guarded<F: FnOnce() -> Result<(), String>>(err: *mut TtString, f: F) -> i32 {
    let outcome = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => return 0,
        Ok(Err(message)) => message,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            format!("internal error in the text library: {what}")
        }
    };
    if !err.is_null() {
        unsafe { *err = to_tt_string(outcome) };
    }
    1
}

#[no_mangle]
pub extern "C" fn tt_string_free(s: TtString) {
    unsafe { free_vec(s.ptr, s.len) }
}

#[no_mangle]
pub extern "C" fn tt_ids_free(ids: TtIds) {
    unsafe {
        free_vec(ids.ids, ids.len);
        free_vec(ids.offsets, ids.len * 2);
    }
}

#[no_mangle]
pub extern "C" fn tt_spans_free(spans: TtSpans) {
    unsafe { free_vec(spans.data, spans.len * 2) }
}

// ---------------------------------------------------------------------------------------------
// Tokenizer

/// Parses the text of a tokenizer.json. On success `*out` owns a new handle.
#[no_mangle]
pub unsafe extern "C" fn tt_tokenizer_from_json(
    json: *const u8,
    len: usize,
    out: *mut *mut TtTokenizer,
    err: *mut TtString,
) -> i32 {
    guarded(err, || {
        let text = unsafe { str_arg(json, len, "tokenizer.json") }?;
        let inner: Tokenizer = text.parse().map_err(|e| format!("{e}"))?;
        unsafe { *out = Box::into_raw(Box::new(TtTokenizer { inner })) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn tt_tokenizer_free(tok: *mut TtTokenizer) {
    if !tok.is_null() {
        unsafe { drop(Box::from_raw(tok)) };
    }
}

#[no_mangle]
pub unsafe extern "C" fn tt_tokenizer_encode(
    tok: *const TtTokenizer,
    text: *const u8,
    len: usize,
    add_special_tokens: i32,
    with_offsets: i32,
    out: *mut TtIds,
    err: *mut TtString,
) -> i32 {
    guarded(err, || {
        let tok = unsafe { &*tok };
        let text = unsafe { str_arg(text, len, "text") }?;
        let encoding = tok.inner.encode(text, add_special_tokens != 0).map_err(|e| format!("encode: {e}"))?;
        let ids: Vec<i32> = encoding.get_ids().iter().map(|&id| id as i32).collect();
        let (offsets_ptr, _) = if with_offsets != 0 {
            let offsets: Vec<i64> = encoding.get_offsets().iter().flat_map(|&(b, e)| [b as i64, e as i64]).collect();
            leak_vec(offsets)
        } else {
            (ptr::null_mut(), 0)
        };
        let (ids_ptr, n) = leak_vec(ids);
        unsafe { *out = TtIds { ids: ids_ptr, offsets: offsets_ptr, len: n } };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn tt_tokenizer_decode(
    tok: *const TtTokenizer,
    ids: *const i32,
    n: usize,
    skip_special_tokens: i32,
    out: *mut TtString,
    err: *mut TtString,
) -> i32 {
    guarded(err, || {
        let tok = unsafe { &*tok };
        let ids: Vec<u32> = if n == 0 {
            Vec::new()
        } else {
            let raw = unsafe { slice::from_raw_parts(ids, n) };
            let mut v = Vec::with_capacity(n);
            for &id in raw {
                if id < 0 {
                    return Err(format!("decode: negative token id {id}"));
                }
                v.push(id as u32);
            }
            v
        };
        let text = tok.inner.decode(&ids, skip_special_tokens != 0).map_err(|e| format!("decode: {e}"))?;
        unsafe { *out = to_tt_string(text) };
        Ok(())
    })
}

/// The id of a token (vocabulary or added), or -1.
#[no_mangle]
pub unsafe extern "C" fn tt_tokenizer_token_to_id(tok: *const TtTokenizer, token: *const u8, len: usize) -> i64 {
    let tok = unsafe { &*tok };
    match unsafe { str_arg(token, len, "token") } {
        Ok(t) => tok.inner.token_to_id(t).map(|id| id as i64).unwrap_or(-1),
        Err(_) => -1,
    }
}

/// The text of a token id; 0 and an empty string when the id is unknown.
#[no_mangle]
pub unsafe extern "C" fn tt_tokenizer_id_to_token(tok: *const TtTokenizer, id: i32, out: *mut TtString) -> i32 {
    let tok = unsafe { &*tok };
    if id < 0 {
        unsafe { *out = empty_string() };
        return 0;
    }
    match tok.inner.id_to_token(id as u32) {
        Some(t) => {
            unsafe { *out = to_tt_string(t) };
            1
        }
        None => {
            unsafe { *out = empty_string() };
            0
        }
    }
}

/// len(tokenizer) of transformers: one past the highest id of the vocabulary and added tokens.
#[no_mangle]
pub unsafe extern "C" fn tt_tokenizer_vocab_size(tok: *const TtTokenizer) -> i64 {
    let tok = unsafe { &*tok };
    let base = tok.inner.get_vocab_size(false) as i64;
    let added = tok.inner.get_added_tokens_decoder().keys().map(|&id| id as i64 + 1).max().unwrap_or(0);
    base.max(added).max(tok.inner.get_vocab_size(true) as i64)
}

/// The added tokens as a JSON array of {"id", "content", "special"} sorted by id.
#[no_mangle]
pub unsafe extern "C" fn tt_tokenizer_added_tokens(tok: *const TtTokenizer, out: *mut TtString) {
    let tok = unsafe { &*tok };
    let mut tokens: Vec<(u32, String, bool)> = tok
        .inner
        .get_added_tokens_decoder()
        .iter()
        .map(|(&id, t)| (id, t.content.clone(), t.special))
        .collect();
    tokens.sort_by_key(|t| t.0);
    let json: Vec<serde_json::Value> = tokens
        .into_iter()
        .map(|(id, content, special)| serde_json::json!({"id": id, "content": content, "special": special}))
        .collect();
    let text = serde_json::to_string(&json).unwrap_or_else(|_| "[]".to_string());
    unsafe { *out = to_tt_string(text) };
}

// ---------------------------------------------------------------------------------------------
// Chat template

/// Compiles a chat template (the `chat_template` of tokenizer_config.json).
#[no_mangle]
pub unsafe extern "C" fn tt_template_new(
    source: *const u8,
    len: usize,
    out: *mut *mut TtTemplate,
    err: *mut TtString,
) -> i32 {
    guarded(err, || {
        let source = unsafe { str_arg(source, len, "chat_template") }?;
        let inner = template::ChatTemplate::new(source)?;
        unsafe { *out = Box::into_raw(Box::new(TtTemplate { inner })) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn tt_template_free(tpl: *mut TtTemplate) {
    if !tpl.is_null() {
        unsafe { drop(Box::from_raw(tpl)) };
    }
}

/// 1 when the template has {% generation %} markers.
#[no_mangle]
pub unsafe extern "C" fn tt_template_has_generation(tpl: *const TtTemplate) -> i32 {
    let tpl = unsafe { &*tpl };
    tpl.inner.has_generation() as i32
}

/// Renders with `context`, a JSON object holding `messages` and every other template variable
/// (tools, add_generation_prompt, bos_token, ...), as transformers' render_jinja_template does:
/// message keys whose value is null are dropped and reasoning fields are aliased.
/// `spans` (may be null) receives the byte ranges of {% generation %} blocks in the output.
#[no_mangle]
pub unsafe extern "C" fn tt_template_render(
    tpl: *const TtTemplate,
    context: *const u8,
    len: usize,
    out: *mut TtString,
    spans: *mut TtSpans,
    err: *mut TtString,
) -> i32 {
    guarded(err, || {
        let tpl = unsafe { &*tpl };
        let context = unsafe { str_arg(context, len, "context") }?;
        let (text, generation) = tpl.inner.render(context)?;
        if !spans.is_null() {
            let flat: Vec<i64> = generation.iter().flat_map(|&(b, e)| [b as i64, e as i64]).collect();
            let (data, n) = leak_vec(flat);
            unsafe { *spans = TtSpans { data, len: n / 2 } };
        }
        unsafe { *out = to_tt_string(text) };
        Ok(())
    })
}
