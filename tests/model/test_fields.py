"""Where each input format keeps a field (`model/fields.py`): the words of the formats
among the inputs, Kineto's when none of them is listed."""

from __future__ import annotations

from commscope.model.fields import FIELDS, where
from commscope.pipeline.flops import peak_flops
from commscope.pipeline.sections import peak_bandwidth


def test_kineto_traces_keep_kinetos_words_and_exports_name_their_tables() -> None:
    assert where("gpu_name", {"kineto"}) == "no deviceProperties"
    assert where("gpu_name", {"nsys"}) == "no TARGET_INFO_GPU table in the Nsight Systems export"
    assert where("base_time", {"nsys"}) == "TARGET_INFO_SESSION_START_TIME"


def test_several_formats_give_each_ones_words_in_the_tables_order() -> None:
    assert where("steps", ["nsys", "kineto"], " or ") == "ProfilerStep or NVTX step range"


def test_inputs_of_no_listed_format_get_kinetos_words() -> None:
    for what, words in FIELDS.items():
        assert where(what, {"inspector"}) == where(what, ()) == words["kineto"]


def test_an_unknown_gpu_names_the_missing_field_of_the_inputs() -> None:
    assert peak_bandwidth(None, None) == (
        None, "GPU unknown (no deviceProperties); give --peak-bandwidth"
    )  # fmt: skip
    _, why = peak_flops(None, None, {"nsys"})
    assert why == (
        "GPU unknown (no TARGET_INFO_GPU table in the Nsight Systems export); give --peak-tflops"
    )
