"""Makes the real-engine lane's model offline: a tiny random-weight Llama on a byte-level BPE tokenizer trained here.

Run with the engine venv's Python (transformers, tokenizers, torch): ``python make_model.py DIR``; nothing is
downloaded. The tokenizer is trained on the standard library's docstrings, so prompts tokenize like English and
code. The weights are random, so EOS may be sampled: the lane sends ``ignore_eos`` and answers run to
``max_tokens``. bf16 where the CPU has AVX-512 BF16, else float32 (DESIGN §5d).
"""

from __future__ import annotations

import io
import pathlib
import pydoc
import sys
import warnings

VOCAB = 8000
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def corpus() -> str:
    """Docstrings of the standard library's modules that import cleanly, in a fixed order."""
    out = io.StringIO()
    warnings.simplefilter("ignore")  # deprecated modules say so on import; their docstrings are still text
    for mod in sorted(m for m in sys.stdlib_module_names if not m.startswith("_")):
        if mod in {"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "test"}:
            continue
        try:
            obj = __import__(mod)
        except Exception:  # a module that does not import here gives no text
            continue
        out.write(pydoc.getdoc(obj) + "\n")
        for name in sorted(dir(obj)):
            try:
                doc = pydoc.getdoc(getattr(obj, name, None))
            except Exception:  # a lazy attribute that fails to load gives no text
                continue
            if doc and len(doc) > 40:
                out.write(doc + "\n")
    return out.getvalue()


def main(target: pathlib.Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    target.mkdir(parents=True, exist_ok=True)
    # Byte-level BPE (GPT-2's scheme): any text tokenizes, nothing is unknown.
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(corpus().splitlines(), trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(target)
    bf16 = "avx512_bf16" in pathlib.Path("/proc/cpuinfo").read_text()
    config = LlamaConfig(vocab_size=len(tok), hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=8192,
                         bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
                         torch_dtype="bfloat16" if bf16 else "float32")
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16 if bf16 else torch.float32)
    model.save_pretrained(target)
    print(f"model: {target} ({'bf16' if bf16 else 'float32'}, vocab {len(tok)})")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))
