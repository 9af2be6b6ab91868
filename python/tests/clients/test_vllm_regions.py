"""The dry run behind --load-format qload's per-rank reads (qload/_vllm_regions.py), on models
whose load_weights do each thing a weight loader may do: a tensor is read in part only when its
one operation is a narrow or a plain slice, anything else reads it whole, a dry run that fails
or replaces parameters reads everything whole, the model is left untouched, and a stand-in
refuses any operation the dry run did not predict. The same dry run names the memory a tensor
can be read straight into: a plain copy of its one cut (or of all of it) into a piece of a
parameter whose rows are contiguous (its columns of a fused parameter too) and that nothing else
writes to."""
import pytest
import torch

from qload import _vllm_regions as regions

SHAPES = {"a": ((8, 4), torch.bfloat16), "b": ((8, 4), torch.bfloat16), "c": ((6,), torch.float32)}


class Model(torch.nn.Module):
    """Parameters a, b, c of half the rows (a, c) or columns (b); `load` is its load_weights body."""

    def __init__(self, load):
        super().__init__()
        self.a = torch.nn.Parameter(torch.full((4, 4), 7.0, dtype=torch.bfloat16), requires_grad=False)
        self.b = torch.nn.Parameter(torch.full((8, 2), 7.0, dtype=torch.bfloat16), requires_grad=False)
        self.c = torch.nn.Parameter(torch.full((3,), 7.0), requires_grad=False)
        self._load = load

    def load_weights(self, weights):
        for name, w in weights:
            self._load(self, name, w)
        return {"a", "b", "c"}


def narrowing(model, name, w):  # what vLLM's column / row parallel loaders do
    param = getattr(model, name)
    if name == "b":
        param.data.copy_(w.narrow(1, 2, 2))
    elif name == "c":
        param.data.copy_(w[3:6])
    else:
        assert w.shape[0] == 8 and w.dtype == torch.bfloat16  # metadata is free
        param.data.copy_(w.narrow(0, 4, 4))


def test_one_narrow_or_slice_is_a_region_and_the_model_is_untouched():
    model = Model(narrowing)
    assert regions.predict(model, SHAPES) == {"a": (0, 4, 8), "b": (1, 2, 4), "c": (0, 3, 6)}
    assert all(bool((p == 7).all()) for p in model.parameters())


def transposed_first(model, name, w):
    if name == "a":
        model.a.data.copy_(w.t().t().narrow(0, 4, 4))
    else:
        narrowing(model, name, w)


def cut_twice(model, name, w):
    if name == "a":
        model.a.data.copy_(torch.cat([w.narrow(0, 4, 2), w.narrow(0, 6, 2)]))
    else:
        narrowing(model, name, w)


def copied_whole_in_place(model, name, w):
    if name == "a":
        model.b.data[:, :] = w[:8:2, 0:2].narrow(0, 0, 4).repeat(2, 1)
    else:
        narrowing(model, name, w)


@pytest.mark.parametrize("load", [transposed_first, cut_twice, copied_whole_in_place])
def test_anything_but_one_cut_reads_the_tensor_whole(load):
    assert regions.predict(Model(load), SHAPES) == {"b": (1, 2, 4), "c": (0, 3, 6)}


def test_a_tensor_copied_as_it_is_is_read_whole():
    def direct(model, name, w):  # what vLLM's default_weight_loader does (the copy is skipped)
        if name == "a":
            model.a.data.copy_(w)
        else:
            narrowing(model, name, w)

    assert regions.predict(Model(direct), SHAPES) == {"b": (1, 2, 4), "c": (0, 3, 6)}


def test_a_tensor_never_touched_is_not_read_and_an_empty_cut_reads_nothing():
    def skips_a(model, name, w):
        if name == "a":
            return  # another pipeline stage's layer, another rank's expert
        if name == "c":
            getattr(model, name)[:0].data.copy_(w.narrow(0, 6, 0))  # this rank's part is empty
            return
        narrowing(model, name, w)

    got = regions.predict(Model(skips_a), SHAPES)
    assert got == {"a": None, "b": (1, 2, 4), "c": (0, 6, 6)}
    assert regions.qload_regions(got) == {"a": (0, 0, 0), "b": (1, 2, 4), "c": (0, 6, 6)}


def test_views_of_the_whole_tensor_are_seen_through():
    """vLLM's expert loader stacks each expert's weight as one (`unsqueeze(0).unbind()`), then
    cuts it or, for another rank's expert, returns: a region, or not read at all."""
    def stacked(model, name, w):
        (w,) = w.unsqueeze(0).unbind()
        if name == "a":
            model.a.data.copy_(w.narrow(0, 4, 4))
        elif name == "b":
            return  # another rank's expert
        else:
            narrowing(model, name, w)

    assert regions.predict(Model(stacked), SHAPES) == {"a": (0, 4, 8), "b": None, "c": (0, 3, 6)}

    def cut_while_stacked(model, name, w):  # a cut of the stack, not of the stored tensor
        if name == "a":
            model.a.data.copy_(w.unsqueeze(0).narrow(1, 4, 4)[0])
        else:
            narrowing(model, name, w)

    assert regions.predict(Model(cut_while_stacked), SHAPES) == {"b": (1, 2, 4), "c": (0, 3, 6)}


def test_a_dry_run_that_fails_or_replaces_parameters_reads_everything_whole():
    def reads_a_value(model, name, w):
        if float(w.sum()) > 0:  # meta tensors have no values
            narrowing(model, name, w)

    assert regions.predict(Model(reads_a_value), SHAPES) == {}

    def replaces(model, name, w):
        model.a = torch.nn.Parameter(w.narrow(0, 4, 4), requires_grad=False)

    model = Model(replaces)
    before = model.a
    assert regions.predict(model, SHAPES) == {}
    assert model.a is before and bool((model.a == 7).all())


def test_a_stand_in_gives_its_region_to_the_predicted_cut_and_refuses_anything_else():
    data = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    t = regions.stand_in("a", data, (8, 4), torch.float32, (0, 4, 8))
    assert t.shape == (8, 4) and t.dim() == 2 and t.dtype == torch.float32
    assert t.narrow(0, 4, 4) is data
    assert t[4:8] is data
    for other in (lambda: t.narrow(0, 0, 4), lambda: t.t(), lambda: t + 1, lambda: torch.zeros(8, 4).copy_(t)):
        with pytest.raises(RuntimeError, match="a: the model's weight loader did .* the only part read"):
            other()
    (stacked,) = t.unsqueeze(0).unbind()  # views of the whole tensor stay stand-ins
    assert stacked.narrow(0, 4, 4) is data
    with pytest.raises(RuntimeError, match="a: the model's weight loader did narrow where"):
        t.unsqueeze(0).narrow(1, 4, 4)
    unused = regions.stand_in("u", None, (8, 4), torch.bfloat16, None)
    assert unused.shape == (8, 4) and unused.dtype == torch.bfloat16
    with pytest.raises(RuntimeError, match="u: the model's weight loader did narrow where a dry run of it did not"):
        unused.narrow(0, 0, 4)


def test_stored_tensors_come_from_inspect_and_unknown_dtypes_read_everything_whole():
    inspected = {"tensors": [{"name": "w", "dtype": "BF16", "shape": [2, 3]},
                             {"name": "s", "dtype": "F8_E4M3", "shape": []}]}
    assert regions.stored_tensors(inspected) == {"w": ((2, 3), torch.bfloat16), "s": ((), torch.float8_e4m3fn)}
    assert regions.stored_tensors({"tensors": [{"name": "x", "dtype": "F4", "shape": [8]}]}) is None


def destinations(load, shapes=SHAPES, convert=True):
    """predict_destinations' {name: (region, parameter, offset in it, shape)} of the memory each
    tensor would be read into, after checking that its regions are predict's and the model is
    left untouched."""
    model = Model(load)
    got_regions, got = regions.predict_destinations(model, shapes, convert)
    assert got_regions == regions.predict(Model(load), shapes)
    assert all(bool((p == 7).all()) for p in model.parameters())
    out = {}
    for name, (target, region) in got.items():
        (pname, param), = [(n, p) for n, p in model.named_parameters()
                           if p.untyped_storage().data_ptr() == target.untyped_storage().data_ptr()]
        offset = (target.data_ptr() - param.data_ptr()) // target.element_size()
        out[name] = (region, pname, offset, tuple(target.shape))
    return out


def test_a_cut_copied_into_a_parameter_is_read_straight_into_it():
    assert destinations(narrowing) == {"a": ((0, 4, 8), "a", 0, (4, 4)), "b": ((1, 2, 4), "b", 0, (8, 2)),
                                       "c": ((0, 3, 6), "c", 0, (3,))}


def test_a_tensor_copied_whole_is_read_whole_into_its_parameter_if_its_dtype_converts():
    shapes = {"a": ((4, 4), torch.float16), "b": ((8, 2), torch.int32), "c": ((3,), torch.float32)}

    def whole(model, name, w):  # vLLM's default_weight_loader: f16 a into bf16, int32 b into bf16
        getattr(model, name).data.copy_(w)

    assert destinations(whole, shapes) == {"a": (None, "a", 0, (4, 4)), "c": (None, "c", 0, (3,))}
    assert destinations(whole, shapes, convert=False) == {"c": (None, "c", 0, (3,))}


def test_cuts_copied_into_rows_of_a_fused_parameter():
    """As q/k/v into qkv_proj, gate/up into gate_up_proj: each into its own rows; the expert
    loader's stack of one (`unsqueeze(0).unbind()`) is seen through."""
    def fused(model, name, w):
        (w,) = w.unsqueeze(0).unbind()
        if name == "c":
            narrowing(model, name, w)
        else:  # a's rows 0-1 into a's rows 0-1, b's rows 4-5 into a's rows 2-3
            model.a.data.narrow(0, 0 if name == "a" else 2, 2).copy_(w.narrow(0, 0 if name == "a" else 4, 2))

    assert destinations(fused) == {"a": ((0, 0, 2), "a", 0, (2, 4)), "b": ((0, 4, 6), "a", 8, (2, 4)),
                                   "c": ((0, 3, 6), "c", 0, (3,))}


def test_cuts_copied_into_columns_of_a_fused_parameter_interleave_and_are_read_straight_in():
    """As GPTQ's packed q/k/v columns into qkv_proj's qweight under tensor parallelism: each
    rank's columns of a and of b into their own columns of one parameter, whose rows the two
    parts share without sharing a byte; parts that share a column are streamed."""
    def columns(model, name, w, second=1):
        if name == "c":
            narrowing(model, name, w)
        else:  # a's column 1 into column 0 of b's parameter, b's column 3 into its column `second`
            model.b.data.narrow(1, 0 if name == "a" else second, 1).copy_(w.narrow(1, 1 if name == "a" else 3, 1))

    assert destinations(columns) == {"a": ((1, 1, 2), "b", 0, (8, 1)), "b": ((1, 3, 4), "b", 1, (8, 1)),
                                     "c": ((0, 3, 6), "c", 0, (3,))}
    assert set(destinations(lambda model, name, w: columns(model, name, w, second=0))) == {"c"}


def filled(model, name, w):
    if name == "a":
        model.a.data.fill_(w.narrow(0, 4, 4).max())
    else:
        narrowing(model, name, w)


def into_a_transpose(model, name, w):
    if name == "a":
        model.a.data.t().copy_(w.narrow(0, 4, 4))  # not contiguous
    else:
        narrowing(model, name, w)


def zeroed_first(model, name, w):
    if name == "a":
        model.a.data.zero_()  # the loader's own write: what was read in would be lost
    narrowing(model, name, w)


def copied_twice(model, name, w):
    narrowing(model, name, w)
    if name == "a":  # into b too, where b is read
        model.b.data[:4].copy_(w.narrow(0, 4, 4)[:, :2])


def shared(model, name, w):
    if name == "b":  # into a's rows 2-3, where a is read
        model.a.data[2:].copy_(w.narrow(0, 0, 2))
    else:
        narrowing(model, name, w)


@pytest.mark.parametrize("load,kept", [
    (transposed_first, {"b", "c"}), (cut_twice, {"b", "c"}), (filled, {"b", "c"}), (into_a_transpose, {"b", "c"}),
    (zeroed_first, {"b", "c"}), (copied_whole_in_place, {"c"}), (copied_twice, {"c"}), (shared, {"c"})])
def test_anything_but_one_plain_copy_into_memory_of_its_own_is_streamed(load, kept):
    """A cut twice, transposed, used for a fill_ or copied into a transposed target is not
    read straight in; nor are two tensors written into the same memory (a and b: a's into b's
    parameter, or b's into a's), nor one its loader writes to otherwise."""
    assert set(destinations(load)) == kept


def test_a_dry_run_that_fails_or_replaces_parameters_has_no_destinations():
    def reads_a_value(model, name, w):
        if float(w.sum()) > 0:
            narrowing(model, name, w)

    def replaces(model, name, w):
        narrowing(model, name, w)
        model.a = torch.nn.Parameter(torch.zeros(4, 4, dtype=torch.bfloat16), requires_grad=False)

    for load in (reads_a_value, replaces):
        model = Model(load)
        before = model.a
        assert regions.predict_destinations(model, SHAPES) == ({}, {})
        assert model.a is before and bool((model.a == 7).all())


def test_the_real_load_copies_the_destination_onto_itself():
    """qload has read a's rows 4-7 into the parameter; the weight loader's narrow of the stand-in
    returns that very memory, and its copy of it changes nothing."""
    model = Model(narrowing)
    (target, region) = regions.predict_destinations(model, SHAPES)[1]["a"]
    read = torch.arange(16, dtype=torch.bfloat16).reshape(4, 4)
    target.copy_(read)  # what load_into writes
    narrowing(model, "a", regions.stand_in("a", target, (8, 4), torch.bfloat16, region))
    assert torch.equal(model.a, read) and model.a.data_ptr() == target.data_ptr()
