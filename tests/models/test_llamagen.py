import pytest
import torch

from mmspec.models.llamagen import CaptionCondition, LlamaGenConfig, LlamaGenGPT


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


def test_cached_blocks_of_several_tokens_match(fixture_model, llamagen_c2i_fixture):
    ref = llamagen_c2i_fixture["reference"]
    tokens = ref["tokens"]
    B, T = tokens.shape
    session = fixture_model.start(ref["cond"], guided=False)
    rows = [session.prefill_logits().cond]
    for start, end in [(0, 5), (5, 6), (6, 15)]:
        pos = torch.arange(start, end).expand(B, -1)
        rows.append(session.forward(tokens[:, start:end], pos).cond)
        session.commit(pos, ones(pos.shape))
    torch.testing.assert_close(torch.cat(rows, 1), ref["cached_logits"], atol=1e-4, rtol=0)


def test_block_written_over_discarded_drafts_matches(fixture_model, llamagen_c2i_fixture):
    """Rejected drafts leave keys in their slots; the next block overwrites them and must
    see nothing of them (the rollback of Jacobi decoding)."""
    ref = llamagen_c2i_fixture["reference"]
    tokens = ref["tokens"]
    B, T = tokens.shape
    g = torch.Generator().manual_seed(0)
    session = fixture_model.start(ref["cond"], guided=False)
    pos = torch.arange(0, 4).expand(B, -1)
    session.forward(tokens[:, :4], pos)
    session.commit(pos, ones(pos.shape))
    # drafts at 4..11, of which only 4..5 are accepted
    drafts = torch.randint(0, 64, (B, 8), generator=g)
    draft_pos = torch.arange(4, 12).expand(B, -1)
    session.forward(drafts, draft_pos)
    # a second, different block over the same slots, then only the true tokens committed
    true_pos = torch.arange(4, 15).expand(B, -1)
    out = session.forward(tokens[:, 4:15], true_pos).cond
    torch.testing.assert_close(out, ref["cached_logits"][:, 5:16], atol=1e-4, rtol=0)


def test_rows_advance_by_their_own_positions(fixture_model, llamagen_c2i_fixture):
    """Each batch row may sit at a different position in the same forward."""
    ref = llamagen_c2i_fixture["reference"]
    tokens = ref["tokens"]
    session = fixture_model.start(ref["cond"], guided=False)
    lengths = [3, 7, 10]
    # all rows feed 10 tokens, but each keeps only its own number of them
    prefix = torch.arange(10).expand(3, -1)
    session.forward(tokens[:, :10], prefix)
    session.commit(prefix, prefix < torch.tensor(lengths)[:, None])
    pos = torch.stack([torch.arange(n, n + 4) for n in lengths])
    out = session.forward(tokens.gather(1, pos), pos).cond
    expected = ref["cached_logits"].gather(1, (pos + 1)[..., None].expand(-1, -1, 64))
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=0)


def test_uncommitted_slots_are_never_attended(fixture_model, llamagen_c2i_fixture):
    """Positions opened out of order (ZipAR) must not see undecoded slots, whatever they hold."""
    ref = llamagen_c2i_fixture["reference"]
    tokens = ref["tokens"]
    outs = []
    for garbage_seed in (1, 2):
        session = fixture_model.start(ref["cond"], guided=False)
        pos = torch.arange(4).expand(3, -1)
        session.forward(tokens[:, :4], pos)
        session.commit(pos, ones(pos.shape))
        junk = torch.randint(0, 64, (3, 8), generator=torch.Generator().manual_seed(garbage_seed))
        session.forward(junk, torch.arange(4, 12).expand(3, -1))  # written, never committed
        # the second row of the 4x4 grid opened before the end of the first is decoded
        outs.append(session.forward(tokens[:, 8:12], torch.arange(8, 12).expand(3, -1)).cond)
    torch.testing.assert_close(outs[0], outs[1], atol=0, rtol=0)


def test_segments_keep_windows_apart(fixture_model, llamagen_c2i_fixture):
    """Two windows in one call with different segments equal the two windows run alone."""
    ref = llamagen_c2i_fixture["reference"]
    tokens = ref["tokens"]

    def fresh():
        s = fixture_model.start(ref["cond"], guided=False)
        pos = torch.arange(4).expand(3, -1)
        s.forward(tokens[:, :4], pos)
        s.commit(pos, ones(pos.shape))
        return s

    a_pos, b_pos = torch.arange(4, 7).expand(3, -1), torch.arange(8, 11).expand(3, -1)
    alone_a = fresh().forward(tokens[:, 4:7], a_pos).cond
    alone_b = fresh().forward(tokens[:, 8:11], b_pos).cond
    both_pos = torch.cat([a_pos, b_pos], 1)
    segments = torch.tensor([0, 0, 0, 1, 1, 1]).expand(3, -1)
    both = fresh().forward(tokens.gather(1, both_pos), both_pos, segments).cond
    torch.testing.assert_close(both, torch.cat([alone_a, alone_b], 1), atol=1e-5, rtol=0)


def test_t2i_cached_matches_full_with_caption_padding():
    torch.manual_seed(0)
    cfg = LlamaGenConfig(dim=32, n_layer=2, n_head=2, vocab_size=32, block_size=9, model_type="t2i", caption_dim=12, cls_token_num=5)
    model = LlamaGenGPT(cfg).eval()
    nn_init = torch.nn.init
    nn_init.normal_(model.output.weight, std=1.0)
    captions = torch.randn(2, 5, 12)
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    tokens = torch.randint(0, 32, (2, 9))
    with torch.no_grad():
        full = model(tokens, captions, mask)
    session = model.start(CaptionCondition(captions, mask), guided=True)
    rows = [session.prefill_logits().cond]
    pos = torch.arange(8).expand(2, -1)
    rows.append(session.forward(tokens[:, :8], pos).cond)
    torch.testing.assert_close(torch.cat(rows, 1), full, atol=1e-5, rtol=0)
    # the padded caption positions are invisible: changing them changes nothing
    other = captions.clone()
    other[0, :2] = torch.randn(2, 12)
    with torch.no_grad():
        torch.testing.assert_close(model(tokens, other, mask), full, atol=1e-5, rtol=0)


def test_grouped_query_attention_cached_matches_full():
    torch.manual_seed(0)
    cfg = LlamaGenConfig(dim=32, n_layer=1, n_head=4, n_kv_head=2, vocab_size=16, block_size=4, num_classes=3)
    model = LlamaGenGPT(cfg).eval()
    tokens = torch.randint(0, 16, (2, 4))
    labels = torch.tensor([0, 2])
    with torch.no_grad():
        full = model(tokens, labels)
    s = model.start(labels, guided=False)
    pos = torch.arange(3).expand(2, -1)
    cached = torch.cat([s.prefill_logits().cond, s.forward(tokens[:, :3], pos).cond], 1)
    torch.testing.assert_close(cached, full, atol=1e-5, rtol=0)


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
