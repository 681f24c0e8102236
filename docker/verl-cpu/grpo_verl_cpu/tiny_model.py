"""`python -m grpo_verl_cpu.tiny_model OUT_DIR [--seed 0]`: the built-in tiny model for CPU runs.

A random `Qwen2ForCausalLM` and its tokenizer, made offline and deterministically (no hub): the same
seed gives byte-identical files. It is a stand-in with the real model's architecture (Qwen2, as
Qwen2.5-3B-Instruct: GQA, tied embeddings, ChatML, `<|im_end|>` ends a turn), so every mechanism of a
verl GRPO run is real on a CPU node; its scores mean nothing about GSM8K.

Sizes (`CONFIG`): hidden 128, 2 layers, 2 attention heads of head_dim 64 (vLLM's CPU attention
refused head_dim 16; 64 works), 1 KV head, MLP 256, tied embeddings, fp32: 357,632 parameters with
seed 0. `VOCAB_SIZE` is the BPE trainer's cap; with `min_frequency=2` on this corpus it stops at 481
tokens (3 special, 256 bytes, 222 merges; digits stay single tokens, as Qwen2's pre-tokenizer splits them).

Tokenizer: byte-level BPE trained with the `tokenizers` library, with Qwen2's normalizer and
pre-tokenizer (one digit per token), on `corpus()`, a fixed text built in here (digits, numbers, arithmetic words, GSM8K-style questions and worked answers, verl's GSM8K
instruction) so GSM8K prompts take few tokens. Special tokens `<|endoftext|>` (padding),
`<|im_start|>`, `<|im_end|>` (EOS); `CHAT_TEMPLATE` is ChatML without a default system message.

Output (`save_pretrained` of transformers' model and tokenizer): config.json, generation_config.json,
model.safetensors, tokenizer.json, tokenizer_config.json, chat_template.jinja (file set depends on
the transformers version; the bytes depend only on the seed and the library versions).
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
from pathlib import Path
from typing import Any, Iterator

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
PAD, BOS, EOS = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
VOCAB_SIZE = 1024
# transformers.models.qwen2.tokenization_qwen2.PRETOKENIZE_REGEX: one digit per token, as in Qwen2.5.
QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CONFIG: dict[str, Any] = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "max_position_embeddings": 1024,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
    "initializer_range": 0.02,
}
# verl's GSM8K instruction (launcher.entrypoint.gsm8k.INSTRUCTION), so it tokenizes into few pieces.
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'

_NAMES = ["Mira", "Tomas", "Ana", "Lee", "Sam", "Nora", "Omar", "Kai", "Lina", "Ben", "Maya", "Ravi"]
_ITEMS = ["apples", "pencils", "books", "cookies", "marbles", "stickers", "eggs", "cards", "coins",
          "muffins", "pages", "flowers", "boxes", "toys", "dollars", "minutes", "miles", "cups"]
_WORDS = ("plus minus times divided by equals sum difference product quotient total each every half "
          "twice double third quarter percent more less than left remaining altogether how many much "
          "what is the answer number count add subtract multiply divide per week day hour month year "
          "buys sells gives gets has had makes spends saves earns reads walks pays costs price "
          "user assistant system").split()


def corpus(seed: int = 0, lines: int = 600) -> list[str]:
    """The fixed training text of the tokenizer: digits, numbers, words and GSM8K-style problems.

    Generated with `random.Random(seed)` (not the global RNG), so it is the same list every time.
    """
    rng = random.Random(seed)
    text = [" ".join(str(d) for d in range(10)), " ".join(str(n) for n in range(101)), " ".join(_WORDS), INSTRUCTION]
    ops = [("+", "plus", lambda a, b: a + b), ("-", "minus", lambda a, b: a - b),
           ("*", "times", lambda a, b: a * b)]
    for _ in range(lines):
        name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
        a, b = rng.randint(2, 99), rng.randint(2, 20)
        sym, word, fn = rng.choice(ops)
        c = fn(a, b)
        question = (f"{name} has {a} {item} and {'gets' if sym == '+' else 'gives away' if sym == '-' else 'buys'} "
                    f"{b} {'more' if sym == '+' else '' if sym == '-' else 'times as many'}. "
                    f"How many {item} does {name} have now? {INSTRUCTION}")
        answer = f"{name} has {a}{sym}{b}=<<{a}{sym}{b}={c}>>{c} {item}.\n#### {c}"
        text += [question, answer, f"{a} {word} {b} equals {c}", f"The answer is {c}. #### {c}"]
    return text


def train_tokenizer(seed: int = 0, vocab_size: int = VOCAB_SIZE):
    """Byte-level BPE on `corpus(seed)`, wrapped as a transformers fast tokenizer with ChatML."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # Qwen2's own normalizer and pre-tokenizer (transformers' Qwen2Tokenizer, which AutoTokenizer
    # builds for model_type qwen2 from our vocab and merges): trained and loaded tokenizer agree.
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tok.train_from_iterator(corpus(seed), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=EOS, pad_token=PAD, chat_template=CHAT_TEMPLATE,
        model_max_length=CONFIG["max_position_embeddings"],
    )


def build(out_dir: str | Path, seed: int = 0) -> dict[str, Any]:
    """Write the model and tokenizer to `out_dir`; return what was made (see `describe`)."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(seed)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        bos_token_id=ids[BOS],
        eos_token_id=ids[EOS],
        pad_token_id=ids[PAD],
        dtype="float32",
        **CONFIG,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(torch.float32)
    model.generation_config = GenerationConfig(
        bos_token_id=ids[BOS], eos_token_id=ids[EOS], pad_token_id=ids[PAD], do_sample=True,
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return describe(out, parameters=sum(p.numel() for p in model.parameters()), vocab_size=len(tokenizer))


def tree_sha256(root: str | Path) -> str:
    """sha256 over every file under `root`: sorted relative paths, each with its length and bytes."""
    h = hashlib.sha256()
    base = Path(root)
    for path in sorted(p for p in base.rglob("*") if p.is_file()):
        data = path.read_bytes()
        h.update(f"{path.relative_to(base).as_posix()}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def describe(out_dir: str | Path, parameters: int, vocab_size: int) -> dict[str, Any]:
    out = Path(out_dir)
    return {
        "path": str(out),
        "architecture": "Qwen2ForCausalLM",
        "parameters": parameters,
        "vocab_size": vocab_size,
        "files": sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()),
        "sha256": tree_sha256(out),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grpo_verl_cpu.tiny_model", description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", help="directory to write (created; existing files are overwritten)")
    parser.add_argument("--seed", type=int, default=0, help="weights and tokenizer corpus seed (default 0)")
    args = parser.parse_args(argv)
    info = build(args.out_dir, seed=args.seed)
    print(f"tiny model: {info['architecture']} at {info['path']} (seed {args.seed})")
    print(f"  parameters {info['parameters']:,}, vocab {info['vocab_size']}, hidden {CONFIG['hidden_size']}, "
          f"layers {CONFIG['num_hidden_layers']}, heads {CONFIG['num_attention_heads']}x{CONFIG['head_dim']}, "
          f"kv heads {CONFIG['num_key_value_heads']}")
    print(f"  files {', '.join(info['files'])}")
    print(f"  sha256 {info['sha256']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
