"""The tiny model's 19-token character tokenizer (`grpo.models.tiny`), made without torch: the
config validator counts toy prompts' tokens with it before anything runs."""

from __future__ import annotations

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from grpo.models.specs import CHARACTERS

ANSWER_OPEN = "<answer>"
ANSWER_CLOSE = "</answer>"
PAD_TOKEN = "<pad>"
EOS_TOKEN = "<eos>"
POSITIONS = 256
"""The tiny model's positions: the longest prompt + response it takes, in tokens."""


def build_tokenizer() -> PreTrainedTokenizerFast:
    """The 19-token character tokenizer: `<pad>`, `<eos>`, the 15 characters of CHARACTERS and
    the single tokens `<answer>` and `</answer>`.

    Text is split into single characters; a character outside the vocabulary raises an error
    when encoding (there is no unknown token). Decoding concatenates tokens without separators.
    `<answer>`/`</answer>` are ordinary (non-special) tokens, so they survive
    `decode(..., skip_special_tokens=True)`; `<pad>` and `<eos>` do not.
    """
    vocab = {PAD_TOKEN: 0, EOS_TOKEN: 1}
    for token in [*CHARACTERS, ANSWER_OPEN, ANSWER_CLOSE]:
        vocab[token] = len(vocab)
    backend = Tokenizer(models.WordLevel(vocab, unk_token=None))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens([AddedToken(PAD_TOKEN, special=True),
                                AddedToken(EOS_TOKEN, special=True)])
    backend.add_tokens([AddedToken(ANSWER_OPEN, normalized=False),
                        AddedToken(ANSWER_CLOSE, normalized=False)])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        clean_up_tokenization_spaces=False,
        model_max_length=POSITIONS,
    )
