"""The torch EAGLE-3 forward against a slow, loop-by-loop reference of the same equations."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from specgate.model import eagle as eagle_model  # noqa: E402
from specgate.model.eagle import DrafterShape, EagleDrafter, Embeddings  # noqa: E402
from specgate.testing.generate import tiny, write_drafter  # noqa: E402

H, HEADS, KV, D, INTER, V, VD = 16, 4, 2, 4, 24, 40, 12


def _model(seed: int = 0, fc_norm: bool = False) -> EagleDrafter:
    g = torch.Generator().manual_seed(seed)
    shape = DrafterShape(H, H, HEADS, KV, D, INTER, V, VD, 3, 10000.0, 1e-6)

    def r(*s: int) -> torch.Tensor:
        return torch.randn(*s, generator=g, dtype=torch.float64) / math.sqrt(s[-1])

    w = {"fc.weight": r(H, 3 * H), "norm.weight": 1 + 0.1 * r(H),
         "lm_head.weight": r(VD, H) * 4,
         "midlayer.self_attn.q_proj.weight": r(HEADS * D, 2 * H),
         "midlayer.self_attn.k_proj.weight": r(KV * D, 2 * H),
         "midlayer.self_attn.v_proj.weight": r(KV * D, 2 * H),
         "midlayer.self_attn.o_proj.weight": r(H, HEADS * D),
         "midlayer.mlp.gate_proj.weight": r(INTER, H), "midlayer.mlp.up_proj.weight": r(INTER, H),
         "midlayer.mlp.down_proj.weight": r(H, INTER)}
    for n in ("input_layernorm", "hidden_norm", "post_attention_layernorm"):
        w[f"midlayer.{n}.weight"] = 1 + 0.1 * r(H)
    if fc_norm:
        for i in range(3):
            w[f"fc_norm.{i}.weight"] = 1 + 0.1 * r(H)
    ids = torch.sort(torch.randperm(V, generator=g)[:VD]).values
    return EagleDrafter(shape, w, ids - torch.arange(VD))


def _norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return w * x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6)


def _rope(x: torch.Tensor, pos: int) -> torch.Tensor:
    half = D // 2
    freq = 1.0 / (10000.0 ** (torch.arange(half, dtype=torch.float64) * 2 / D))
    ang = pos * freq
    c, s = torch.cat([ang.cos()] * 2), torch.cat([ang.sin()] * 2)
    rot = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * c + rot * s


def _reference_chain(m: EagleDrafter, emb: torch.Tensor, ids: torch.Tensor, aux: torch.Tensor,
                     steps: int) -> list[torch.Tensor]:
    """SpecForge's training-time test written out position by position."""
    w = m.w
    n = ids.shape[0]
    if m.fc_norms[0] is not None:
        aux = torch.cat([_norm(c, nw) for c, nw in zip(aux.chunk(3, -1), m.fc_norms,
                                                       strict=True)], -1)
    hidden = aux @ w["fc.weight"].T
    keys: list[list[torch.Tensor]] = []
    values: list[list[torch.Tensor]] = []
    outs = []
    for k in range(steps):
        new_hidden = torch.empty_like(hidden)
        ks, vs, qs = [], [], []
        for t in range(n):
            tok = ids[min(t + 1 + k, n - 1)]
            x = torch.cat([_norm(emb[tok], w["layers.0.input_layernorm.weight"]),
                           _norm(hidden[t], w["layers.0.hidden_norm.weight"])])
            q = (w["layers.0.self_attn.q_proj.weight"] @ x).view(HEADS, D)
            kk = (w["layers.0.self_attn.k_proj.weight"] @ x).view(KV, D)
            vv = (w["layers.0.self_attn.v_proj.weight"] @ x).view(KV, D)
            qs.append(_rope(q, t + k))
            ks.append(_rope(kk, t + k))
            vs.append(vv)
        keys.append(ks)
        values.append(vs)
        for t in range(n):
            heads = []
            for h in range(HEADS):
                g = h // (HEADS // KV)
                cand_k = [keys[0][j][g] for j in range(t + 1)] + [keys[i][t][g]
                                                                  for i in range(1, k + 1)]
                cand_v = [values[0][j][g] for j in range(t + 1)] + [values[i][t][g]
                                                                    for i in range(1, k + 1)]
                scores = torch.stack([qs[t][h] @ c for c in cand_k]) / math.sqrt(D)
                p = torch.softmax(scores, 0)
                heads.append(sum(pi * vi for pi, vi in zip(p, cand_v, strict=True)))
            attn = torch.cat(heads)
            h1 = hidden[t] + w["layers.0.self_attn.o_proj.weight"] @ attn
            x = _norm(h1, w["layers.0.post_attention_layernorm.weight"])
            gate = torch.nn.functional.silu(w["layers.0.mlp.gate_proj.weight"] @ x)
            new_hidden[t] = h1 + w["layers.0.mlp.down_proj.weight"] @ (
                gate * (w["layers.0.mlp.up_proj.weight"] @ x))
        hidden = new_hidden
        outs.append(hidden)
    return outs


@pytest.mark.parametrize("fc_norm", [False, True])
def test_chain_matches_reference_at_every_step(monkeypatch: pytest.MonkeyPatch,
                                               fc_norm: bool) -> None:
    monkeypatch.setattr(eagle_model, "ATTENTION_BLOCK", 3)  # several query blocks
    m = _model(fc_norm=fc_norm)
    g = torch.Generator().manual_seed(1)
    emb = torch.randn(V, H, generator=g, dtype=torch.float64)
    ids = torch.randint(0, V, (9,), generator=g)
    aux = torch.randn(9, 3 * H, generator=g, dtype=torch.float64)
    got = m.chain(Embeddings(emb), ids, aux, steps=3)
    want = _reference_chain(m, emb, ids, aux, steps=3)
    for k in range(3):
        torch.testing.assert_close(got[k], want[k], rtol=1e-9, atol=1e-9)


def test_packed_chain_equals_each_sequence_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Training packs sequences: attention and positions stay within each segment."""
    monkeypatch.setattr(eagle_model, "ATTENTION_BLOCK", 4)
    m = _model(seed=4)
    g = torch.Generator().manual_seed(5)
    emb = Embeddings(torch.randn(V, H, generator=g, dtype=torch.float64))
    lengths = [7, 5, 9]
    ids = [torch.randint(0, V, (n,), generator=g) for n in lengths]
    aux = [torch.randn(n, 3 * H, generator=g, dtype=torch.float64) for n in lengths]
    segments = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])
    packed = m.chain(emb, torch.cat(ids), torch.cat(aux), steps=3, segments=segments)
    start = 0
    for one_ids, one_aux, n in zip(ids, aux, lengths, strict=True):
        alone = m.chain(emb, one_ids, one_aux, steps=3)
        for k in range(3):
            # rows whose fed token t + 1 + k stays inside the sequence
            rows = n - 1 - k
            torch.testing.assert_close(packed[k][start:start + rows], alone[k][:rows],
                                       rtol=1e-9, atol=1e-9)
        start += n
    with pytest.raises(ValueError, match="non-decreasing"):
        m.chain(emb, torch.cat(ids), torch.cat(aux), steps=1, segments=segments.flip(0))


def test_decode_with_cache_equals_step_zero_of_chain() -> None:
    m = _model(seed=2)
    g = torch.Generator().manual_seed(3)
    emb = Embeddings(torch.randn(V, H, generator=g, dtype=torch.float64))
    ids = torch.randint(0, V, (7,), generator=g)
    aux = torch.randn(7, 3 * H, generator=g, dtype=torch.float64)
    step0 = m.chain(emb, ids, aux, steps=1)[0]
    cache = m.new_cache(16)
    hidden = m.project(aux)
    for t in range(6):
        out = m.decode(emb(ids[t + 1:t + 2]), hidden[t:t + 1], torch.tensor([t]), cache)
        torch.testing.assert_close(out[0], step0[t], rtol=1e-9, atol=1e-9)


def test_to_target_applies_d2t_and_sparse_embeddings_look_up_rows() -> None:
    m = _model()
    draft = torch.arange(VD)
    assert torch.equal(m.to_target(draft), m.hot_ids)
    weight = torch.randn(3, H)
    sparse = Embeddings(weight, torch.tensor([30, 5, 17]))
    assert torch.equal(sparse(torch.tensor([17, 5])), weight[[2, 1]])
    with pytest.raises(KeyError, match="no row"):
        sparse(torch.tensor([6]))


def test_from_checkpoint_reads_a_generated_drafter(tmp_path: Path) -> None:
    folder = write_drafter(tmp_path / "d", tiny(), fill="random", name_style="midlayer")
    m = EagleDrafter.from_checkpoint(folder)
    s = tiny()
    assert m.shape.draft_vocab_size == s.draft_vocab_size
    assert m.shape.head_dim == s.head_dim
    assert "layers.0.self_attn.q_proj.weight" in m.w
    n = 5
    out = m.chain(Embeddings(torch.randn(s.vocab_size, s.hidden_size)),
                  torch.randint(0, s.vocab_size, (n,)), torch.randn(n, 3 * s.hidden_size), 2)
    assert [o.shape for o in out] == [(n, s.hidden_size)] * 2
    assert m.logits(out[0]).shape == (n, s.draft_vocab_size)
