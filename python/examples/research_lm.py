"""docs/export.md's worked example: a research model no builder knows, exported.

  python python/examples/research_lm.py research_lm.graph.json

A decoder whose blocks use a squared-ReLU MLP and a learned per-channel gate
on the residual (nothing in shardscope's builders), trained with a plain
cross-entropy loss. About 1.1B parameters.
"""
import sys

import torch
import torch.nn.functional as F

from shardscope_torch import export

VOCAB, DIM, HEADS, LAYERS, FFN = 32000, 2048, 16, 16, 8192


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(DIM)
        self.qkv = torch.nn.Linear(DIM, 3 * DIM, bias=False)
        self.proj = torch.nn.Linear(DIM, DIM, bias=False)
        self.norm2 = torch.nn.LayerNorm(DIM)
        self.up = torch.nn.Linear(DIM, FFN, bias=False)
        self.down = torch.nn.Linear(FFN, DIM, bias=False)
        self.gate = torch.nn.Parameter(torch.ones(DIM))

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, DIM))
        h = F.relu(self.up(self.norm2(x))).square()  # squared ReLU
        return x + self.gate * self.down(h)


class ResearchLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, DIM)
        self.blocks = torch.nn.ModuleList([Block() for _ in range(LAYERS)])
        self.norm = torch.nn.LayerNorm(DIM)
        self.head = torch.nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, ids, labels):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x)).float()
        return F.cross_entropy(logits.view(-1, VOCAB), labels.view(-1))


def batch(b, t):
    return {"ids": torch.randint(0, VOCAB, (b, t)), "labels": torch.randint(0, VOCAB, (b, t))}


if __name__ == "__main__":
    export(ResearchLM, batch, out=sys.argv[1] if len(sys.argv) > 1 else "research_lm.graph.json",
           wrap_classes=["Block"], max_seq_len=4096, vocab_size=VOCAB,
           source="module:research_lm.ResearchLM", verbose=True)
