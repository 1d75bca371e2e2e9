"""Memory cache keys name the model by what it is, not where it lies (scgmem/llm/loading.py)."""
import shutil

from scgmem.llm.loading import model_identity


def write_model(folder, hidden=64):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(f'{{"hidden_size": {hidden}}}')
    (folder / "model.safetensors").write_bytes(b"\0" * 128)
    return folder


def test_a_moved_model_folder_keeps_its_identity(tmp_path):
    first = write_model(tmp_path / "a" / "models" / "Tiny")
    moved = tmp_path / "b" / "cache" / "models" / "Tiny"
    shutil.copytree(first, moved)
    assert model_identity(str(first)) == model_identity(str(moved))
    assert model_identity(str(first)).startswith("Tiny@")


def test_other_weights_or_config_change_the_identity(tmp_path):
    base = model_identity(str(write_model(tmp_path / "x" / "Tiny")))
    assert model_identity(str(write_model(tmp_path / "y" / "Tiny", hidden=32))) != base
    other = write_model(tmp_path / "z" / "Tiny")
    (other / "model.safetensors").write_bytes(b"\0" * 256)
    assert model_identity(str(other)) != base


def test_a_hub_id_is_its_own_identity():
    assert model_identity("Qwen/Qwen2.5-1.5B-Instruct") == "Qwen/Qwen2.5-1.5B-Instruct"
