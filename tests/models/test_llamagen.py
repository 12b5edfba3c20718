import pytest
import torch

from mmspec.models.networks.llamagen import LlamaGenConfig, LlamaGenGPT


@pytest.fixture(scope="module")
def fixture_model(llamagen_c2i_fixture):
    f = llamagen_c2i_fixture
    return LlamaGenGPT.from_checkpoint(f["root"] / "gpt.pt", LlamaGenConfig.from_dict(f["config"]["gpt"]))


def ones(shape):
    return torch.ones(shape, dtype=torch.bool)


def test_full_forward_matches_original(fixture_model, llamagen_c2i_fixture):
    ref = llamagen_c2i_fixture["reference"]
    with torch.no_grad():
        logits = fixture_model(ref["tokens"], ref["cond"])
    torch.testing.assert_close(logits, ref["full_logits"], atol=1e-4, rtol=0)


def test_cached_one_token_at_a_time_matches_original(fixture_model, llamagen_c2i_fixture):
    ref = llamagen_c2i_fixture["reference"]
    tokens = ref["tokens"]
    B, T = tokens.shape
    session = fixture_model.start(ref["cond"], guided=False)
    rows = [session.prefill_logits().cond]
    for t in range(T - 1):
        pos = torch.full((B, 1), t)
        rows.append(session.forward(tokens[:, t : t + 1], pos).cond)
        session.commit(pos, ones((B, 1)))
    torch.testing.assert_close(torch.cat(rows, 1), ref["cached_logits"], atol=1e-4, rtol=0)


def test_null_class_prefill_matches_original(fixture_model, llamagen_c2i_fixture):
    ref = llamagen_c2i_fixture["reference"]
    session = fixture_model.start(ref["cond"], guided=True)
    torch.testing.assert_close(session.prefill_logits().uncond[:, 0], ref["null_prefill_logits"], atol=1e-4, rtol=0)


def test_padded_caption_positions_are_invisible_to_the_teacher_forced_pass():
    """What the caption mask hides changes nothing (the cached session against this pass
    is in tests/models/test_session_contract.py)."""
    torch.manual_seed(0)
    cfg = LlamaGenConfig(dim=32, n_layer=2, n_head=2, vocab_size=32, block_size=9, model_type="t2i", caption_dim=12, cls_token_num=5)
    model = LlamaGenGPT(cfg).eval()
    torch.nn.init.normal_(model.output.weight, std=1.0)
    captions = torch.randn(2, 5, 12)
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    tokens = torch.randint(0, 32, (2, 9))
    other = captions.clone()
    other[0, :2] = torch.randn(2, 12)
    with torch.no_grad():
        torch.testing.assert_close(model(tokens, other, mask), model(tokens, captions, mask), atol=1e-5, rtol=0)
        assert not torch.allclose(model(tokens, other), model(tokens, captions), atol=1e-3)  # unmasked, they count


def test_grouped_query_attention_is_heads_sharing_their_kv_head():
    """A model with 2 KV heads for 4 query heads is the 4-KV-head model whose key and value
    heads are copies, each KV head serving consecutive query heads (repeat_interleave)."""
    torch.manual_seed(0)
    fields = dict(dim=32, n_layer=2, n_head=4, vocab_size=16, block_size=4, num_classes=3)
    grouped = LlamaGenGPT(LlamaGenConfig(**fields, n_kv_head=2)).eval()
    full = LlamaGenGPT(LlamaGenConfig(**fields)).eval()
    state = grouped.state_dict()
    for i in range(2):
        q, k, v = state[f"layers.{i}.attention.wqkv.weight"].split([32, 16, 16])
        k, v = (w.view(2, 8, 32).repeat_interleave(2, dim=0).reshape(32, 32) for w in (k, v))
        state[f"layers.{i}.attention.wqkv.weight"] = torch.cat([q, k, v])
    full.load_state_dict(state)
    tokens, labels = torch.randint(0, 16, (2, 4)), torch.tensor([0, 2])
    sessions = [m.start(labels, guided=True) for m in (grouped, full)]
    pos = torch.arange(3).expand(2, -1)
    a, b = (s.forward(tokens[:, :3], pos) for s in sessions)
    torch.testing.assert_close(a.cond, b.cond, atol=1e-6, rtol=0)
    torch.testing.assert_close(a.uncond, b.uncond, atol=1e-6, rtol=0)


# (name, layers, heads, dim, ffn hidden) of the original factory
PRESETS = [
    ("GPT-B", 12, 12, 768, 2048),
    ("GPT-L", 24, 16, 1024, 2816),
    ("GPT-XL", 36, 20, 1280, 3584),
    ("GPT-XXL", 48, 24, 1536, 4096),
    ("GPT-XXXL", 48, 40, 2560, 6912),
    ("GPT-1B", 22, 32, 2048, 5632),
    ("GPT-3B", 24, 32, 3200, 8704),
    ("GPT-7B", 32, 32, 4096, 11008),
]


@pytest.mark.parametrize("name,layers,heads,dim,ffn", PRESETS)
def test_named_sizes_have_the_original_shapes(name, layers, heads, dim, ffn):
    cfg = LlamaGenConfig.from_name(name)
    with torch.device("meta"):
        model = LlamaGenGPT(cfg)
    sd = model.state_dict()
    assert len(model.layers) == layers
    assert sd["layers.0.attention.wqkv.weight"].shape == (3 * dim, dim)
    assert sd["layers.0.feed_forward.w1.weight"].shape == (ffn, dim)
    assert sd["cls_embedding.embedding_table.weight"].shape == (1001, dim)
    assert sd["output.weight"].shape == (16384, dim)
    assert cfg.head_dim * heads == dim


def test_t2i_xl_keys_match_original_names():
    with torch.device("meta"):
        model = LlamaGenGPT(LlamaGenConfig.from_name("GPT-XL", model_type="t2i", cls_token_num=120))
    sd = model.state_dict()
    assert sd["cls_embedding.cap_proj.fc1.weight"].shape == (1280, 2048)
    assert sd["cls_embedding.uncond_embedding"].shape == (120, 2048)


def test_unknown_config_name_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown LlamaGen config 'GPT-Z'; choose from GPT-B"):
        LlamaGenConfig.from_name("GPT-Z")
    with pytest.raises(ValueError, match="unknown LlamaGen config fields bogus"):
        LlamaGenConfig.from_dict({"bogus": 1})
    with pytest.raises(ValueError, match="not a perfect square"):
        LlamaGenConfig(block_size=10)


def test_checkpoint_that_does_not_fit_names_the_keys(llamagen_c2i_fixture):
    root = llamagen_c2i_fixture["root"]
    cfg = dict(llamagen_c2i_fixture["config"]["gpt"])
    with pytest.raises(ValueError, match=r"shape mismatch: .*tok_embeddings.weight \(64, 64\) vs \(32, 64\)"):
        LlamaGenGPT.from_checkpoint(root / "gpt.pt", LlamaGenConfig.from_dict({**cfg, "vocab_size": 32}))
    with pytest.raises(ValueError, match=r"unexpected keys: layers.1.attention.wqkv.weight"):
        LlamaGenGPT.from_checkpoint(root / "gpt.pt", LlamaGenConfig.from_dict({**cfg, "n_layer": 1}))


def test_class_label_out_of_range_is_a_clear_error(fixture_model):
    with pytest.raises(ValueError, match=r"class label 10 is out of range \[0, 10\)"):
        fixture_model.start(torch.tensor([1, 10]), guided=True)


def test_batch_too_large_for_allocated_cache(fixture_model):
    cache = fixture_model.allocate_cache(max_batch_size=4)
    fixture_model.start(torch.tensor([1, 2]), guided=True, cache=cache)
    with pytest.raises(ValueError, match=r"batch of 6 cache rows \(3 conditions x 2 for CFG\) exceeds the allocated cache's 4"):
        fixture_model.start(torch.tensor([1, 2, 3]), guided=True, cache=cache)


def test_reused_cache_gives_the_same_logits(fixture_model, llamagen_c2i_fixture):
    ref = llamagen_c2i_fixture["reference"]
    cache = fixture_model.allocate_cache(max_batch_size=6)
    first = fixture_model.start(ref["cond"], guided=True, cache=cache)
    pos = torch.arange(6).expand(3, -1)
    first.forward(ref["tokens"][:, :6], pos)
    first.commit(pos, ones(pos.shape))
    again = fixture_model.start(ref["cond"], guided=False, cache=cache)
    out = again.forward(ref["tokens"][:, :2], pos[:, :2]).cond
    torch.testing.assert_close(out, ref["cached_logits"][:, 1:3], atol=1e-4, rtol=0)
