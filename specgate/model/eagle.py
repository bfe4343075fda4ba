"""A torch forward of the EAGLE-3 Llama-style drafter, as SpecForge trains and SGLang serves it.

One decoder layer over concat(input_layernorm(token embedding), hidden_norm(hidden)): q/k/v of
2×hidden in, causal attention with RoPE, o_proj, residual, post-attention norm, SiLU MLP, final
norm, lm_head over the draft vocabulary, d2t to target ids. Step 0 takes fc(aux hidden states of
the target); step k > 0 takes the drafter's own pre-norm output of step k-1 (SGLang's default
`norm_output = false`) and attends to the step-0 keys of every earlier position plus its own
earlier steps' keys at the same position, with RoPE position t + k: SpecForge's training-time
test, which is what a chain of draft steps sees at serving time.

RoPE is plain (rope_theta); a config's rope_scaling (YaRN, llama3) is not applied, and the
evaluation says so when a drafter asks for it.

Embeddings: SGLang always replaces the drafter's embedding with the target's, so the caller
supplies a token embedding table (`Embeddings`), normally the target's rows from the dump.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from specgate.io.checkpoint import Drafter, normalize_name, open_drafter, read_tensor

# Query rows per attention block: bounds the [heads, block, T] score tensor on long samples.
ATTENTION_BLOCK = 512


@dataclasses.dataclass(frozen=True)
class DrafterShape:
    """The sizes a forward needs, read from a drafter's config.json."""

    hidden_size: int
    target_hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    draft_vocab_size: int
    n_aux: int
    rope_theta: float
    rms_norm_eps: float

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> DrafterShape:
        h = int(config["hidden_size"])
        heads = int(config["num_attention_heads"])
        eagle = config.get("eagle_config") or {}
        ids = eagle.get("eagle_aux_hidden_state_layer_ids") if isinstance(eagle, dict) else None
        n_aux = int(config.get("num_aux_hidden_states") or (len(ids) if ids else 3))
        vocab = int(config["vocab_size"])
        return cls(
            hidden_size=h,
            target_hidden_size=int(config.get("target_hidden_size") or h),
            num_heads=heads,
            num_kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or h // heads),
            intermediate_size=int(config["intermediate_size"]),
            vocab_size=vocab,
            draft_vocab_size=int(config.get("draft_vocab_size") or vocab),
            n_aux=n_aux,
            rope_theta=float(config.get("rope_theta") or _rope_theta(config) or 10000.0),
            rms_norm_eps=float(config.get("rms_norm_eps") or 1e-6),
        )


def _rope_theta(config: Mapping[str, Any]) -> float | None:
    params = config.get("rope_parameters")
    if isinstance(params, dict) and params.get("rope_theta"):
        return float(params["rope_theta"])
    return None


class Embeddings:
    """A token embedding table, whole ([V, h]) or only the rows of some token ids."""

    def __init__(self, weight: torch.Tensor, token_ids: torch.Tensor | None = None) -> None:
        self.weight = weight
        self.token_ids = None if token_ids is None else token_ids.to(torch.int64)
        if self.token_ids is not None and bool((self.token_ids[1:] <= self.token_ids[:-1]).any()):
            order = torch.argsort(self.token_ids)
            self.token_ids = self.token_ids[order]
            self.weight = self.weight[order]

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        if self.token_ids is None:
            return self.weight[ids]
        rows = torch.searchsorted(self.token_ids, ids).clamp(max=len(self.token_ids) - 1)
        if not bool((self.token_ids[rows] == ids).all()):
            missing = sorted(set(ids.tolist()) - set(self.token_ids.tolist()))[:5]
            raise KeyError(f"the embedding table has no row for token id(s) {missing}")
        return self.weight[rows]

    def to(self, device: torch.device | str, dtype: torch.dtype) -> Embeddings:
        ids = None if self.token_ids is None else self.token_ids.to(device)
        return Embeddings(self.weight.to(device=device, dtype=dtype), ids)


class EagleDrafter:
    """The drafter's weights as torch tensors, with the EAGLE-3 forward over them."""

    def __init__(self, shape: DrafterShape, weights: Mapping[str, torch.Tensor],
                 d2t: torch.Tensor | None) -> None:
        self.shape = shape
        self.w = {normalize_name(k): v for k, v in weights.items()}
        ref = self.w["fc.weight"]
        self.device, self.dtype = ref.device, ref.dtype
        vd = shape.draft_vocab_size
        if d2t is None:
            d2t = torch.zeros(vd, dtype=torch.int64)
        self.hot_ids = (d2t.to(torch.int64) + torch.arange(vd)).to(self.device)
        self.fc_norms = [self.w.get(f"fc_norm.{i}.weight") for i in range(shape.n_aux)]
        d = shape.head_dim
        inv = 1.0 / (shape.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
        self.inv_freq = inv.to(self.device)
        # attention math in float32 at least (float64 models stay exact)
        self.acc = torch.promote_types(self.dtype, torch.float32)

    @classmethod
    def from_checkpoint(cls, path: Path | str | Drafter, *, device: str = "cpu",
                        dtype: torch.dtype = torch.float32) -> EagleDrafter:
        drafter = path if isinstance(path, Drafter) else open_drafter(path)
        shape = DrafterShape.from_config(drafter.config)
        weights: dict[str, torch.Tensor] = {}
        d2t = None
        for name in drafter.tensors:
            canon = normalize_name(name)
            if canon in ("t2d", "embed_tokens.weight"):
                continue
            array = read_tensor(drafter, name)
            if canon == "d2t":
                d2t = torch.from_numpy(np.ascontiguousarray(array).astype(np.int64))
                continue
            weights[canon] = torch.from_numpy(np.ascontiguousarray(array)).to(
                device=device, dtype=dtype)
        return cls(shape, weights, d2t)

    def use_map(self, d2t: np.ndarray[Any, Any]) -> None:
        """Read lm_head rows through another map, as a fine-tune that skips the init's d2t does."""
        if d2t.shape != (self.shape.draft_vocab_size,):
            raise ValueError(f"the map has {d2t.shape[0]} draft positions, lm_head has "
                             f"{self.shape.draft_vocab_size} rows")
        ids = d2t.astype(np.int64) + np.arange(d2t.shape[0], dtype=np.int64)
        self.hot_ids = torch.from_numpy(ids).to(self.device)

    def own_embeddings(self, drafter: Drafter) -> Embeddings | None:
        """The drafter's own embed_tokens, when its checkpoint carries one."""
        info = drafter.find("embed_tokens.weight")
        if info is None:
            return None
        weight = torch.from_numpy(np.ascontiguousarray(read_tensor(drafter, info.name)))
        return Embeddings(weight.to(device=self.device, dtype=self.dtype))

    # --- the forward ---------------------------------------------------------------------------

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        xa = x.to(self.acc)
        xa = xa * torch.rsqrt(xa.pow(2).mean(-1, keepdim=True) + self.shape.rms_norm_eps)
        return weight * xa.to(weight.dtype)

    def project(self, aux: torch.Tensor) -> torch.Tensor:
        """fc over the concatenated aux hidden states [T, n_aux × th] → [T, h]."""
        aux = aux.to(device=self.device, dtype=self.dtype)
        if any(n is not None for n in self.fc_norms):
            chunks = aux.chunk(self.shape.n_aux, dim=-1)
            aux = torch.cat([c if n is None else self.rms_norm(c, n)
                             for c, n in zip(chunks, self.fc_norms, strict=True)], dim=-1)
        return aux @ self.w["fc.weight"].T

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        out = x @ self.w[f"{name}.weight"].T
        bias = self.w.get(f"{name}.bias")
        return out if bias is None else out + bias

    def _rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        angles = positions.to(torch.float64)[:, None] * self.inv_freq[None, :]
        cos = torch.cat([angles.cos(), angles.cos()], -1)[:, None, :].to(x.dtype)
        sin = torch.cat([angles.sin(), angles.sin()], -1)[:, None, :].to(x.dtype)
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    def layer(self, embeds: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor,
              cache: list[tuple[torch.Tensor, torch.Tensor]],
              segments: torch.Tensor | None = None) -> torch.Tensor:
        """One draft step for T positions in parallel; appends this step's keys/values to cache.

        cache[0] holds the step-0 keys/values of every position (causal); cache[j > 0] those of
        step j, which a later step's query at position t sees only at t. With `segments` (one
        id per position, non-decreasing), a query sees step-0 keys of its own segment only:
        several sequences packed into one.
        """
        s, p = self.shape, "layers.0"
        w = self.w
        residual = hidden
        x = torch.cat([self.rms_norm(embeds, w[f"{p}.input_layernorm.weight"]),
                       self.rms_norm(hidden, w[f"{p}.hidden_norm.weight"])], dim=-1)
        n = x.shape[0]
        q = self._linear(x, f"{p}.self_attn.q_proj").view(n, s.num_heads, s.head_dim)
        k = self._linear(x, f"{p}.self_attn.k_proj").view(n, s.num_kv_heads, s.head_dim)
        v = self._linear(x, f"{p}.self_attn.v_proj").view(n, s.num_kv_heads, s.head_dim)
        q, k = self._rope(q, positions), self._rope(k, positions)
        cache.append((k, v))
        attn = self._attention(q, cache, segments).reshape(n, s.num_heads * s.head_dim)
        hidden = residual + self._linear(attn, f"{p}.self_attn.o_proj")
        residual = hidden
        x = self.rms_norm(hidden, w[f"{p}.post_attention_layernorm.weight"])
        gate = torch.nn.functional.silu(self._linear(x, f"{p}.mlp.gate_proj"))
        mlp = self._linear(gate * self._linear(x, f"{p}.mlp.up_proj"), f"{p}.mlp.down_proj")
        return residual + mlp

    def new_cache(self, max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Key and value buffers [max_len, kv_heads, head_dim] for `decode`."""
        s = self.shape
        size = (max_len, s.num_kv_heads, s.head_dim)
        return (torch.zeros(size, device=self.device, dtype=self.dtype),
                torch.zeros(size, device=self.device, dtype=self.dtype))

    def decode(self, embeds: torch.Tensor, hidden: torch.Tensor, position: torch.Tensor,
               cache: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """One position of one step-0 forward against a key/value cache, as in serving.

        `position` is a one-element int64 tensor on the model's device, so the call has static
        shapes and can be captured in a CUDA graph; keys past it are masked.
        """
        s, p, w = self.shape, "layers.0", self.w
        keys, values = cache
        residual = hidden
        x = torch.cat([self.rms_norm(embeds, w[f"{p}.input_layernorm.weight"]),
                       self.rms_norm(hidden, w[f"{p}.hidden_norm.weight"])], dim=-1)
        q = self._linear(x, f"{p}.self_attn.q_proj").view(1, s.num_heads, s.head_dim)
        k = self._linear(x, f"{p}.self_attn.k_proj").view(1, s.num_kv_heads, s.head_dim)
        v = self._linear(x, f"{p}.self_attn.v_proj").view(1, s.num_kv_heads, s.head_dim)
        q, k = self._rope(q, position), self._rope(k, position)
        keys.index_copy_(0, position, k)
        values.index_copy_(0, position, v)
        visible = torch.arange(keys.shape[0], device=keys.device) <= position
        # SDPA keeps the cache in its dtype and accumulates in float32 (fused on CUDA)
        attn = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(0, 1)[None], keys.transpose(0, 1)[None], values.transpose(0, 1)[None],
            attn_mask=visible[None, None, None, :],
            enable_gqa=s.num_heads != s.num_kv_heads)[0].transpose(0, 1).reshape(1, -1)
        hidden = residual + self._linear(attn, f"{p}.self_attn.o_proj")
        residual = hidden
        x = self.rms_norm(hidden, w[f"{p}.post_attention_layernorm.weight"])
        gate = torch.nn.functional.silu(self._linear(x, f"{p}.mlp.gate_proj"))
        return residual + self._linear(gate * self._linear(x, f"{p}.mlp.up_proj"),
                                       f"{p}.mlp.down_proj")

    def _attention(self, q: torch.Tensor, cache: list[tuple[torch.Tensor, torch.Tensor]],
                   segments: torch.Tensor | None = None) -> torch.Tensor:
        s = self.shape
        groups = s.num_heads // s.num_kv_heads
        scale = 1.0 / math.sqrt(s.head_dim)

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.repeat_interleave(groups, dim=1) if groups > 1 else t

        k0, v0 = heads(cache[0][0]), heads(cache[0][1])
        diag = [(heads(k), heads(v)) for k, v in cache[1:]]
        n = q.shape[0]
        out = torch.empty_like(q)
        for start in range(0, n, ATTENTION_BLOCK):
            stop = min(n, start + ATTENTION_BLOCK)
            qb = q[start:stop].to(self.acc)
            # [heads, block, n] against step-0 keys, causal
            scores = torch.einsum("qhd,khd->hqk", qb, k0.to(self.acc)) * scale
            mask = torch.arange(n, device=q.device)[None, :] > torch.arange(
                start, stop, device=q.device)[:, None]
            if segments is not None:
                mask = mask | (segments[None, :] != segments[start:stop, None])
            scores = scores.masked_fill(mask[None], float("-inf"))
            extra = [((qb * kj[start:stop].to(self.acc)).sum(-1) * scale).T[:, :, None]
                     for kj, _ in diag]
            probs = torch.softmax(torch.cat([scores, *extra], dim=-1), dim=-1)
            ctx = torch.einsum("hqk,khd->qhd", probs[..., :n], v0.to(self.acc))
            for j, (_, vj) in enumerate(diag):
                ctx = ctx + probs[..., n + j].T[:, :, None] * vj[start:stop].to(self.acc)
            out[start:stop] = ctx.to(q.dtype)
        return out

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits [T, Vd] of a step's pre-norm output."""
        return self.rms_norm(hidden, self.w["norm.weight"]) @ self.w["lm_head.weight"].T

    def to_target(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Target-vocabulary ids of draft ids: draft_id + d2t[draft_id]."""
        return self.hot_ids[draft_ids]

    def chain(self, embed: Embeddings, input_ids: torch.Tensor, aux: torch.Tensor,
              steps: int, segments: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Pre-norm outputs of draft steps 0..steps-1 at every position (teacher-forced tokens).

        Step k at position t is fed the embedding of input_ids[t + 1 + k] and predicts
        input_ids[t + 2 + k]; past the end the last id is repeated (those rows are never scored).
        `segments` packs several sequences into one (see `layer`): attention stays within a
        segment and positions restart at 0 in each; a row whose token t + 1 + k lies in the next
        segment is fed that token, so a caller scores only predictions inside one segment.
        """
        n = input_ids.shape[0]
        ids = input_ids.to(self.device)
        hidden = self.project(aux)
        base = torch.arange(n, device=self.device)
        local = base
        seg = None
        if segments is not None:
            seg = segments.to(self.device)
            if seg.shape != (n,) or bool((seg[1:] < seg[:-1]).any()):
                raise ValueError("segments must hold one non-decreasing id per position")
            starts = torch.ones(n, dtype=torch.bool, device=self.device)
            starts[1:] = seg[1:] != seg[:-1]
            first = torch.cummax(torch.where(starts, base, torch.zeros_like(base)), 0).values
            local = base - first
        cache: list[tuple[torch.Tensor, torch.Tensor]] = []
        outs = []
        for k in range(steps):
            tokens = ids[(base + 1 + k).clamp(max=n - 1)]
            hidden = self.layer(embed(tokens).to(self.dtype), hidden, local + k, cache, seg)
            outs.append(hidden)
        return outs
