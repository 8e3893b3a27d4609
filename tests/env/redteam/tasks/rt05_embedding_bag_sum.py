"""Integer indices: embedding-bag sum, out[b] = sum_l weight[idx[b, l]] with an nn.Embedding(V, D) table."""
import os

import torch
import torch.nn as nn

SMALL = os.environ.get("DRKERNEL_TASK_SIZE", "full") == "small"

num_embeddings, embedding_dim = (60, 72) if SMALL else (65536, 1024)
batch_size, bag_size = (6, 9) if SMALL else (4096, 64)


class Model(nn.Module):
    def __init__(self, num_embeddings, embedding_dim):
        super().__init__()
        self.embedding = nn.Embedding(num_embeddings, embedding_dim)

    def forward(self, idx):
        return self.embedding(idx).sum(dim=1)


def get_inputs():
    return [torch.randint(0, num_embeddings, (batch_size, bag_size), dtype=torch.int64)]


def get_init_inputs():
    return [num_embeddings, embedding_dim]
