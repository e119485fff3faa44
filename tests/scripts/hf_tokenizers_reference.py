"""Reference tokenizer.json files and ids from Hugging Face's `tokenizers`, for dlkit's parity test
(tests/data/test_hf_tokenizer.cpp) and bench (scripts/bench-hf-tokenizer.sh).

    python hf_tokenizers_reference.py OUT_DIR REPO_DIR [TEXT_BYTES [--no-ids]]

Trains three small BPE tokenizers locally, on the repository's Markdown and a multilingual sample
generated here, in the three styles dlkit reads, and writes variants of them:
  gpt2/, gpt2-prefix/    ByteLevel pre-tokenizer and decoder (the second with add_prefix_space)
  llama3/, qwen2/        Split on Llama 3's / Qwen2's pattern, then ByteLevel (use_regex false);
                         qwen2 with Qwen2's NFC normalizer
  sentencepiece/         Prepend("▁") + Replace(" ", "▁") normalizers, byte_fallback, unk, the
                         Replace/ByteFallback/Fuse/Strip decoders (Llama 2's layout)
  metaspace/             the same model with a Metaspace pre-tokenizer (prepend_scheme "first")
Each folder gets tokenizer.json and, for OUT_DIR/text.txt (TEXT_BYTES of multilingual text, 1 MB by
default, the same on every run), ids.bin (int32, encode(add_special_tokens=False) of the whole
text), decoded.txt (decode(ids, skip_special_tokens=False)) and meta.json ({"round_trips": whether
decoded.txt equals the text, "encode_seconds"}); --no-ids writes the tokenizer.json files and the
text only (the bench).
"""
import json
import os
import random
import sys
import time
import unicodedata

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

LLAMA3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


def char_range(a, b):
    return [chr(c) for c in range(a, b + 1)]


CYRILLIC = char_range(0x430, 0x44F) + ["ё"]
ARABIC = char_range(0x627, 0x64A)
DEVANAGARI_C = char_range(0x915, 0x939)
DEVANAGARI_V = ["", "", "ा", "ि", "ी", "ु", "ू", "े", "ै", "ो", "ौ", "ं", "्"]
CJK = char_range(0x4E00, 0x4E00 + 299) + char_range(0x3041, 0x3093)  # common ideographs, hiragana
HANGUL = char_range(0xAC00, 0xAC00 + 199)
EMOJI = ["😀", "🎉", "👍", "👍🏽", "👨‍👩‍👧", "🇩🇪", "🚀", "❤️", "✨", "🤖"]
SPACES = [" ", "  ", "   ", "\t", "\t\t", "\u00a0", "\u3000", " \t ", "\u2003"]
PUNCT = ["!", "?", "...", ",", ";", ":", "—", "«", "»", "“", "”", "(", ")", "[", "]", "{", "}", "->", "+=", "==", "#", "@", "/"]
# Text NFC changes: decomposed letters, marks out of canonical order, Hangul jamo, an excluded composite.
UNNORMALIZED = [unicodedata.normalize("NFD", w) for w in ["café", "naïve", "Ångström", "Tiếng Việt", "한국어", "Ḍ̇"]] + [
    "e\u0323\u0302", "\u0958", "\u1100\u1161\u11a8", "A\u030a\u0301"]
CONTRACTIONS = ["don't", "I'M", "we'Ve", "it's", "they'LL", "she'd", "'s", "O'Neil", "rock'n'roll", "'T"]
SPECIALS = ["<|endoftext|>", "<s>", "</s>", "<|begin_of_text|>", "<|end_of_text|>"]


def word(rng, english):
    kind = rng.random()
    if kind < 0.35:
        return rng.choice(english)
    if kind < 0.45:
        return "".join(rng.choice(CYRILLIC) for _ in range(rng.randint(2, 9)))
    if kind < 0.52:
        return "".join(rng.choice(ARABIC) for _ in range(rng.randint(2, 7)))
    if kind < 0.59:
        return "".join(rng.choice(DEVANAGARI_C) + rng.choice(DEVANAGARI_V) for _ in range(rng.randint(1, 4)))
    if kind < 0.68:
        return "".join(rng.choice(CJK) for _ in range(rng.randint(1, 6)))
    if kind < 0.71:
        return "".join(rng.choice(HANGUL) for _ in range(rng.randint(1, 4)))
    if kind < 0.75:
        return rng.choice(EMOJI) * rng.randint(1, 2)
    if kind < 0.83:
        n = rng.random()
        if n < 0.5:
            return str(rng.randint(0, 10 ** rng.randint(1, 9)))
        if n < 0.7:
            return "%d.%02d" % (rng.randint(0, 9999), rng.randint(0, 99))
        if n < 0.85:
            return "".join(chr(0x660 + rng.randint(0, 9)) for _ in range(rng.randint(1, 5)))  # Arabic-Indic
        return "".join(chr(0xFF10 + rng.randint(0, 9)) for _ in range(rng.randint(1, 5)))  # full-width
    if kind < 0.87:
        return rng.choice(CONTRACTIONS)
    if kind < 0.90:
        return rng.choice(UNNORMALIZED)
    if kind < 0.97:
        return rng.choice(PUNCT) * rng.randint(1, 3)
    return rng.choice(english).upper()


def sample_text(rng, english, nbytes, specials):
    """Lines of mixed scripts with runs of white space, CRLF and blank lines, about nbytes long."""
    out, size = [], 0
    while size < nbytes:
        parts = []
        for _ in range(rng.randint(3, 25)):
            parts.append(word(rng, english))
            r = rng.random()
            parts.append(rng.choice(SPACES) if r < 0.15 else "" if r < 0.2 else " ")
        if specials and rng.random() < 0.05:
            parts.insert(rng.randrange(len(parts) + 1), rng.choice(SPECIALS))
        end = rng.choice(["\n", "\n", "\n", "\r\n", "\n\n", "  \n", "\n\n\n", " \r\n\r\n"])
        line = "".join(parts) + end
        out.append(line)
        size += len(line.encode())
    return "".join(out)


def trained(model, pre, decoder, specials, vocab_size, texts, limit_alphabet=None, alphabet=None):
    tok = Tokenizer(model)
    tok.pre_tokenizer = pre
    tok.decoder = decoder
    kw = {"vocab_size": vocab_size, "special_tokens": specials, "show_progress": False}
    if limit_alphabet:
        kw["limit_alphabet"] = limit_alphabet
    if alphabet:
        kw["initial_alphabet"] = alphabet
    tok.train_from_iterator(texts, trainers.BpeTrainer(**kw))
    return json.loads(tok.to_str())


def main():
    out, repo = sys.argv[1], sys.argv[2]
    nbytes = int(sys.argv[3]) if len(sys.argv) > 3 else 1_000_000
    with_ids = "--no-ids" not in sys.argv[4:]
    os.makedirs(out, exist_ok=True)
    docs = []
    for root in [repo, os.path.join(repo, "docs")]:
        for name in sorted(os.listdir(root)):
            if name.endswith(".md"):
                docs.append(open(os.path.join(root, name), encoding="utf-8").read())
    english = sorted({w for d in docs for w in d.split() if w.isalpha()}) or ["the"]
    corpus = docs + sample_text(random.Random(1), english, 600_000, False).splitlines()
    text = sample_text(random.Random(2), english, nbytes, True)
    with open(os.path.join(out, "text.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(text)

    files = {}
    gpt2 = trained(models.BPE(), pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel(),
                   ["<|endoftext|>"], 4000, corpus, alphabet=pre_tokenizers.ByteLevel.alphabet())
    gpt2["post_processor"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    files["gpt2"] = gpt2
    prefix = json.loads(json.dumps(gpt2))
    prefix["pre_tokenizer"]["add_prefix_space"] = True
    files["gpt2-prefix"] = prefix

    split = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
                                     pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    llama3 = trained(models.BPE(ignore_merges=True), split, decoders.ByteLevel(),
                     ["<|begin_of_text|>", "<|end_of_text|>"], 6000, corpus, alphabet=pre_tokenizers.ByteLevel.alphabet())
    llama3["post_processor"] = json.loads(processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", 0)]).__getstate__())
    files["llama3"] = llama3
    qwen2 = json.loads(json.dumps(llama3))
    qwen2["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = QWEN2
    qwen2["model"]["ignore_merges"] = False
    qwen2["normalizer"] = {"type": "NFC"}  # as Qwen2's file
    qwen2["post_processor"] = None
    files["qwen2"] = qwen2

    # SentencePiece style: trained on "▁"-words of lines (a newline is a byte token, as in Llama 2),
    # the 256 byte tokens in the model's vocabulary.
    byte_tokens = ["<0x%02X>" % b for b in range(256)]
    sp = trained(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True),
                 pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True), None,
                 ["<unk>", "<s>", "</s>"] + byte_tokens, 3000, [l for c in corpus for l in c.splitlines()], limit_alphabet=150)
    sp["added_tokens"] = [t for t in sp["added_tokens"] if t["content"] not in byte_tokens]
    sp["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                                            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
    sp["pre_tokenizer"] = None
    sp["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    sp["post_processor"] = json.loads(processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", 1)]).__getstate__())
    files["sentencepiece"] = sp
    meta = json.loads(json.dumps(sp))
    meta["normalizer"] = None
    meta["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
    files["metaspace"] = meta

    for name, spec in files.items():
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(spec, f, ensure_ascii=False)
        if not with_ids:
            continue
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        t0 = time.perf_counter()
        ids = tok.encode(text, add_special_tokens=False).ids
        secs = time.perf_counter() - t0
        decoded = tok.decode(ids, skip_special_tokens=False)
        with open(os.path.join(d, "ids.bin"), "wb") as f:
            f.write(b"".join(i.to_bytes(4, "little") for i in ids))
        with open(os.path.join(d, "decoded.txt"), "w", encoding="utf-8", newline="") as f:
            f.write(decoded)
        with open(os.path.join(d, "meta.json"), "w") as f:
            json.dump({"round_trips": decoded == text, "encode_seconds": secs, "tokens": len(ids)}, f)
    with open(os.path.join(out, "llama3", "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}, f)


if __name__ == "__main__":
    main()
