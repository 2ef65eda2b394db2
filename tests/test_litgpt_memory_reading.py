"""LitGPT's memory rows read as its model code builds them: phi-1.5 and StableLM Alpha name no preset, so the
harness gives them GPT's conventions, tied embedding included; LitGPT's GPT keeps its own LM head
(lit_gpt/model.py: `lm_head` an nn.Linear beside `transformer.wte`), and the rows say so."""

from __future__ import annotations

import pytest

from armillary.validation.memory_rows import MEMORY_CSV, predict_memory
from armillary.validation.rows import row_specs
from armillary.validation.run import read_rows

ROWS = {r["id"]: r for r in read_rows(MEMORY_CSV)}
WORDS = "not tied to the embedding"


@pytest.mark.parametrize("row_id", ["MEM-LITGPT-2310-SLM3B-MB1", "MEM-LITGPT-2310-PHI15-MB1"])
def test_an_untied_lm_head_is_a_second_vocabulary_matrix_at_16_bits(row_id: str) -> None:
    """bf16 LoRA: the frozen LM head adds vocab x hidden x 2 bytes (by hand from the row's columns), nothing else."""
    row = ROWS[row_id]
    assert WORDS in row["notes"]
    assert row_specs({**row, "kind": "training"})[0].model.tied_embeddings  # GPT's conventions, before the notes
    untied = predict_memory(row)
    tied = predict_memory({**row, "notes": row["notes"].replace(WORDS, "shared with the embedding")})
    assert any("tied_embeddings=False" in n for n in untied.notes)
    assert not any("tied_embeddings=False" in n for n in tied.notes)
    head = int(row["vocab"]) * int(row["hidden"]) * 2  # bf16, in bytes; the unit is decimal GB
    assert (untied.predicted - tied.predicted) * 1e9 == pytest.approx(head, rel=0.01)


def test_a_llama_row_keeps_its_presets_own_head() -> None:
    """Llama 2 is untied in its preset already: the words change nothing."""
    row = ROWS["MEM-LITGPT-2310-L2-7B-MB1"]
    assert WORDS in row["notes"]
    assert predict_memory(row).predicted == pytest.approx(
        predict_memory({**row, "notes": row["notes"].replace(WORDS, "")}).predicted)
