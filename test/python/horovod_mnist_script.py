#!/usr/bin/env python3
"""A training script written the way Horovod's PyTorch MNIST example is (argument parsing,
DistributedSampler with hvd.size()/hvd.rank(), learning rate scaled by hvd.size(), parameters and
optimizer state broadcast from rank 0, DistributedOptimizer with fp16 compression and
gradient_predivide_factor, metric averaging with hvd.allreduce), with only the import changed:
`import chorus.torch as hvd` in place of `import horovod.torch as hvd`. The data are synthetic (no
downloads): 28x28 images whose class is the quadrant with the brightest blob.

It checks what a user would look at: the test accuracy rises well above chance, every rank reports
the same averaged metrics, and the final weights are identical on every rank.

Run: mpirun -np 2 /usr/bin/python3 test/python/horovod_mnist_script.py"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data.distributed

import chorus.torch as hvd


def synthetic_digits(samples, seed):
    generator = torch.Generator().manual_seed(seed)
    images = torch.rand(samples, 1, 28, 28, generator=generator) * 0.3
    labels = torch.randint(0, 4, (samples,), generator=generator)
    for i, label in enumerate(labels.tolist()):
        row, column = (label // 2) * 14 + 4, (label % 2) * 14 + 4
        images[i, 0, row:row + 6, column:column + 6] += 0.7
    return torch.utils.data.TensorDataset(images, labels)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, kernel_size=5)
        self.conv2 = nn.Conv2d(8, 16, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(256, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 256)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


def metric_average(val, name):
    tensor = torch.tensor(val)
    avg_tensor = hvd.allreduce(tensor, name=name)
    return avg_tensor.item()


def main():
    parser = argparse.ArgumentParser(description="PyTorch MNIST Example (Horovod-style)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--test-batch-size", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--momentum", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--fp16-allreduce", action="store_true", default=True)
    parser.add_argument("--use-adasum", action="store_true", default=False)
    parser.add_argument("--gradient-predivide-factor", type=float, default=1.0)
    args = parser.parse_args()

    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    train_dataset = synthetic_digits(2048, seed=1)
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_dataset, num_replicas=hvd.size(), rank=hvd.rank())
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size,
                                               sampler=train_sampler)
    test_dataset = synthetic_digits(800, seed=2)
    test_sampler = torch.utils.data.distributed.DistributedSampler(
        test_dataset, num_replicas=hvd.size(), rank=hvd.rank())
    test_loader = torch.utils.data.DataLoader(test_dataset, batch_size=args.test_batch_size,
                                              sampler=test_sampler)

    model = Net()
    lr_scaler = hvd.size() if not args.use_adasum else 1
    optimizer = optim.SGD(model.parameters(), lr=args.lr * lr_scaler, momentum=args.momentum)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer,
                                         named_parameters=model.named_parameters(),
                                         compression=compression,
                                         op=hvd.Adasum if args.use_adasum else hvd.Average,
                                         gradient_predivide_factor=args.gradient_predivide_factor)

    accuracies = []
    for epoch in range(1, args.epochs + 1):
        model.train()
        train_sampler.set_epoch(epoch)
        for data, target in train_loader:
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            optimizer.step()
        model.eval()
        test_loss, test_accuracy = 0.0, 0.0
        with torch.no_grad():
            for data, target in test_loader:
                output = model(data)
                test_loss += F.nll_loss(output, target, reduction="sum").item()
                pred = output.data.max(1, keepdim=True)[1]
                test_accuracy += pred.eq(target.data.view_as(pred)).float().sum().item()
        test_loss /= len(test_sampler)
        test_accuracy /= len(test_sampler)
        test_loss = metric_average(test_loss, "avg_loss")
        test_accuracy = metric_average(test_accuracy, "avg_accuracy")
        accuracies.append(test_accuracy)
        if hvd.rank() == 0:
            print(f"epoch {epoch}: test loss {test_loss:.4f}, accuracy {100 * test_accuracy:.1f}%",
                  flush=True)

    # What the user would check by hand: every rank saw the same averaged metric and holds the
    # same weights.
    everyone = hvd.allgather_object(accuracies[-1], name="check.accuracy")
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    spread = hvd.allreduce(weights, op=hvd.Max, name="check.max") - \
        hvd.allreduce(weights, op=hvd.Min, name="check.min")
    failures = []
    if accuracies[-1] < 0.6:
        failures.append(f"accuracy {accuracies[-1]:.2f} is not well above chance (0.25)")
    if len(set(everyone)) != 1:
        failures.append(f"ranks report different averaged accuracies: {everyone}")
    if spread.abs().max().item() != 0:
        failures.append("the final weights differ between ranks")
    if hvd.rank() == 0:
        print("horovod mnist script: " + ("; ".join(failures) if failures else "ok"), flush=True)
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()
