"""Embedding lookup: out[b, s] = weight[idx[b, s]] with an nn.Embedding(V, D) table and int64 indices."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

num_embeddings = 50 if SMALL else 32000
embedding_dim = 70 if SMALL else 1024
batch_size = 3 if SMALL else 16
seq_len = 11 if SMALL else 2048


class Model(nn.Module):
    def __init__(self, num_embeddings: int, embedding_dim: int):
        super().__init__()
        self.embedding = nn.Embedding(num_embeddings, embedding_dim)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.embedding(idx)


def get_inputs():
    return [torch.randint(0, num_embeddings, (batch_size, seq_len), dtype=torch.int64)]


def get_init_inputs():
    return [num_embeddings, embedding_dim]
