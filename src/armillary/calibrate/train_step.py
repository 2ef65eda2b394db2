"""The end-to-end check of a compute calibration: one training step of a small GPT (fp32, fused causal
attention, fused AdamW) measured with torch, and the same step estimated by armillary on the fitted device.

The torch model is the architecture the model spec describes (`spec`): learned positions, pre-LayerNorm
blocks with biased linears, GeLU MLP, tied embeddings, no dropout; the step is forward, backward and the
optimizer step of one micro-batch on one device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from armillary.estimate.run import estimate_training_run
from armillary.specs.device import Device
from armillary.specs.loading import load_model
from armillary.specs.network import NetworkDimension
from armillary.specs.strategy import Attention, Strategy, TrainingPrecision
from armillary.specs.system import System
from armillary.specs.workload import Training


@dataclass(frozen=True)
class StepConfig:
    layers: int = 4
    hidden: int = 512
    heads: int = 8
    vocab: int = 8192
    seq: int = 256
    batch: int = 4

    def spec(self) -> dict[str, Any]:
        """The model as armillary reads it."""
        return {"name": f"gpt-{self.layers}x{self.hidden}", "layers": self.layers, "hidden": self.hidden,
                "heads": self.heads, "ffn": 4 * self.hidden, "mlp": "gelu", "norm": "layernorm",
                "position": "learned", "vocab": self.vocab, "tied_embeddings": True, "linear_bias": True,
                "dropout": False, "max_seq_len": self.seq}


def estimate_step(config: StepConfig, device: Device) -> float:
    """armillary's step time for one micro-batch on one `device` (fp32, fused attention)."""
    system = System(name=f"one {device.name}", device=device, network=(NetworkDimension(
        name="none", size=1, bandwidth=1e9, latency=1e-6, efficiency=1.0),))
    strategy = Strategy(attention=Attention.FLASH, precision=TrainingPrecision.FP32, micro_batch=config.batch)
    workload = Training(seq_len=config.seq, global_batch=config.batch)
    return float(estimate_training_run(load_model(config.spec()), system, strategy, workload).step_time_s)


def _model(torch: Any, c: StepConfig) -> Any:
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(c.hidden), nn.LayerNorm(c.hidden)
            self.qkv, self.proj = nn.Linear(c.hidden, 3 * c.hidden), nn.Linear(c.hidden, c.hidden)
            self.up, self.down = nn.Linear(c.hidden, 4 * c.hidden), nn.Linear(4 * c.hidden, c.hidden)

        def forward(self, x: Any) -> Any:
            b, s, h = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, c.heads, h // c.heads).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, h)
            x = x + self.proj(a)
            return x + self.down(F.gelu(self.up(self.ln2(x))))

    class Gpt(nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.pos = nn.Embedding(c.vocab, c.hidden), nn.Embedding(c.seq, c.hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(c.layers))
            self.ln = nn.LayerNorm(c.hidden)
            # GPT-2's initialisation (std 0.02; Radford et al. 2019): nn.Embedding's N(0, 1) makes the tied
            # head's logits saturate the softmax, whose denormal gradients slow every CPU matmul ~10x
            for table in (self.embed, self.pos):
                nn.init.normal_(table.weight, std=0.02)

        def forward(self, tokens: Any) -> Any:
            x = self.embed(tokens) + self.pos.weight[: tokens.shape[1]]
            for block in self.blocks:
                x = block(x)
            logits = self.ln(x) @ self.embed.weight.T  # tied LM head
            return F.cross_entropy(logits.view(-1, c.vocab), tokens.view(-1))

    return Gpt()


def measure_step(config: StepConfig, steps: int = 3) -> float:
    """Seconds of one training step on the CPU (or the first GPU): the fastest of `steps` after a warm-up,
    on the calibration's clock (`compute_bench.clock`)."""
    import torch

    from armillary.calibrate.compute_bench import clock

    now = clock()
    dev = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    model = _model(torch, config).to(dev)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    tokens = torch.randint(0, config.vocab, (config.batch, config.seq), device=dev)
    best = float("inf")
    for i in range(steps + 1):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        start = now()
        optimizer.zero_grad(set_to_none=True)
        model(tokens).backward()
        optimizer.step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        if i > 0:  # the first step allocates the optimizer state
            best = min(best, now() - start)
    return best
