"""--probe knn: the weighted k-nearest-neighbour vote of DINO's evaluation on a frozen backbone's features. Features
are L2-normalised; a query's k most cosine-similar training samples vote for their class with weight
exp(similarity / T); the votes, normalised, are its class probabilities (log: the logits every figure is scored from).

Exact: ties in similarity at the k-th place are broken by the lower training index (not left to topk's kernel), and
every query is compared with every training sample. `KnnHead` is the same vote as a model's classifier, on a memory
bank saved beside the weights (predict.py)."""

import torch

KNN_FILE = "knn_bank.safetensors"  # a --probe knn run's memory bank, in its folder and in model/
TINY = 1e-12  # a class no neighbour voted for: log-probability log(1e-12), not -inf (the loss stays finite)


def normalised(features):
    return torch.nn.functional.normalize(features.float(), dim=1)


def nearest(similarity, k):
    """Indices (queries, k) of each row's k largest similarities, ties at the k-th value broken by the lower index."""
    values, index = similarity.topk(k, dim=1)
    kth = values[:, -1:]
    places = k - (similarity > kth).sum(dim=1)  # what the k-th value's ties fill
    tied = (similarity == kth).sum(dim=1)
    for row in torch.nonzero(tied > places).flatten().tolist():  # more ties than places: topk chose among them
        index[row] = torch.sort(similarity[row], descending=True, stable=True).indices[:k]
    return index


def knn_log_probs(queries, bank, bank_labels, classes, k, temperature):
    """(queries, classes) log-probabilities of normalised `queries` by the vote of the normalised `bank` (n, dim) with
    class indices `bank_labels`."""
    similarity = queries @ bank.T
    index = nearest(similarity, min(k, len(bank)))
    votes = torch.zeros(len(queries), classes, dtype=similarity.dtype, device=similarity.device)
    votes.scatter_add_(1, bank_labels[index], (similarity.gather(1, index) / temperature).exp())
    return (votes / votes.sum(dim=1, keepdim=True)).clamp_min(TINY).log()


class KnnHead(torch.nn.Module):
    """A model's classifier replaced by the kNN vote over a memory bank: it reads what the classifier read."""

    def __init__(self, bank, labels, classes, k, temperature):
        super().__init__()
        self.register_buffer("bank", normalised(bank))
        self.register_buffer("labels", labels.long())
        self.classes, self.k, self.temperature = classes, k, temperature

    def forward(self, features):
        return knn_log_probs(normalised(features.flatten(1)), self.bank, self.labels, self.classes, self.k,
                             self.temperature)


def knn_head(folder):
    """The KnnHead of the memory bank a --probe knn run wrote to `folder` (KNN_FILE)."""
    from safetensors import safe_open

    with safe_open(folder / KNN_FILE, "pt") as f:
        meta, bank, labels = f.metadata(), f.get_tensor("bank"), f.get_tensor("labels")
    return KnnHead(bank, labels, int(meta["classes"]), int(meta["k"]), float(meta["temperature"]))
