"""Tokenizer parity: our encode/decode (rust/text behind src/engine/text) against the Hugging
Face `tokenizers` library and transformers' AutoTokenizer on the same tokenizer.json."""
from __future__ import annotations

from models import tokenizer_dir

CORPUS = [
    "",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog. It's 3.14159 — isn't it?",
    "Grüße aus München: Straße, Äpfel, œuvre, naïve café",
    "日本語のテキストと中文文本混合在一起。한국어 문장도 있습니다.",
    "مرحبا بالعالم، هذا نص عربي مع أرقام ١٢٣ و 456.",
    "Привет, мир! Съешь же ещё этих мягких французских булок.",
    "नमस्ते दुनिया, यह देवनागरी लिपि है।",
    "Emoji: 🙂👍🏽👨‍👩‍👧‍👦🇫🇷 ❤️‍🔥 and ZWJ sequences",
    "def f(x):\n    return {'a': [x ** 2 for x in range(10)]}  # comment\n\n\tif x:\n\t\tpass\n",
    "#include <vector>\nint main() { std::vector<int> v{1, 2, 3}; return v[0] != 1; }",
    "    leading spaces and trailing spaces    ",
    "a" + " " * 37 + "b" + "\n" * 9 + "c" + "\t \t \n \r\n" * 4,
    "          ",
    "\n\n\n",
    "numbers 1234567890 12 123 1234 0.5 -7e10 1,000,000",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhey<|eot_id|>",
    "<|endoftext|> and <think>thinking</think> <tool_call>{}</tool_call>",
    "text<|im_end|>glued<|eot_id|>to<|end_of_text|>words",
    "URLs https://example.com/a?b=c&d=e#f and emails a.b@c.de",
    "Mixed: αβγ δεζ ηθι — ＡＢＣ全角 ｶﾀｶﾅ ㎏ ﬁ ligature",
    "ÀÁÂÃÄÅ àáâãäå combining: e\u0301 a\u0308 n\u0303",
    "Zero width: a\u200bb\u200cc\u200dd\ufeffe",
    "'s 't 're 've 'm 'll 'd IT'S I'M",
    "x" * 500,
    "🙂" * 40,
]


def test_encode_matches_tokenizers_and_transformers(probe, tokenizer_name, raw_tokenizers, hf_tokenizers):
    folder = str(tokenizer_dir(tokenizer_name))
    raw = raw_tokenizers[tokenizer_name]
    hf = hf_tokenizers[tokenizer_name]
    mismatches = []
    for text in CORPUS:
        for special in (False, True):
            ours = probe.ok(op="encode", dir=folder, text=text, add_special_tokens=special)
            theirs = raw.encode(text, add_special_tokens=special)
            if ours["ids"] != theirs.ids:
                mismatches.append(("tokenizers", special, text, ours["ids"], theirs.ids))
            hf_ids = hf.encode(text, add_special_tokens=special)
            if ours["ids"] != hf_ids:
                mismatches.append(("transformers", special, text, ours["ids"], hf_ids))
    assert not mismatches, mismatches[:3]


def test_offsets_cover_the_text_in_bytes(probe, tokenizer_name, raw_tokenizers):
    folder = str(tokenizer_dir(tokenizer_name))
    raw = raw_tokenizers[tokenizer_name]
    for text in CORPUS:
        ours = probe.ok(op="encode", dir=folder, text=text, add_special_tokens=False)
        theirs = raw.encode(text, add_special_tokens=False)
        # The `tokenizers` offsets are in characters; ours are in UTF-8 bytes.
        expected = [[len(text[:b].encode()), len(text[:e].encode())] for b, e in theirs.offsets]
        assert ours["offsets"] == expected, text


def test_decode_matches(probe, tokenizer_name, raw_tokenizers, hf_tokenizers):
    folder = str(tokenizer_dir(tokenizer_name))
    raw = raw_tokenizers[tokenizer_name]
    hf = hf_tokenizers[tokenizer_name]
    for text in CORPUS:
        ids = raw.encode(text, add_special_tokens=True).ids
        for skip in (False, True):
            ours = probe.ok(op="decode", dir=folder, ids=ids, skip_special_tokens=skip)["text"]
            assert ours == raw.decode(ids, skip_special_tokens=skip), text
            assert ours == hf.decode(ids, skip_special_tokens=skip), text


def test_vocabulary_and_special_tokens(probe, tokenizer_name, hf_tokenizers):
    hf = hf_tokenizers[tokenizer_name]
    info = probe.ok(op="info", dir=str(tokenizer_dir(tokenizer_name)))
    assert info["vocab_size"] == len(hf)
    assert info["eos_id"] == hf.eos_token_id
    assert info["bos_id"] == hf.bos_token_id
    assert info["pad_id"] == (hf.pad_token_id if hf.pad_token_id is not None else hf.eos_token_id)
    assert info["has_chat_template"] is True
