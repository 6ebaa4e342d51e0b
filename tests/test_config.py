"""The configuration loader: precedence flag > env > file > defaults, origins, coercion, clear errors."""

from pathlib import Path

import pytest

from sessionmem_pipeline.config import ConfigError, load_settings


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_any_file(tmp_path: Path) -> None:
    settings = load_settings(env={}, cwd=tmp_path, home=tmp_path)
    assert settings["embedding.provider"] == "local"
    assert settings["llm.provider"] == "none"
    assert settings["summaries.idle_minutes"] == 30
    assert settings["chunking.max_tokens"] == 500
    assert settings.warehouse == tmp_path / "warehouse" / "sessionmem.duckdb"
    assert settings.origins["chunking.max_tokens"] == "default"
    assert settings.config_file is None


def test_precedence_flag_over_env_over_file_over_default(tmp_path: Path) -> None:
    _write(tmp_path / "sessionmem.toml", "[chunking]\nmax_tokens = 300\n[summaries]\nidle_minutes = 10\n")
    env = {"SESSIONMEM_CHUNKING__MAX_TOKENS": "400", "SESSIONMEM_SUMMARIES__MESSAGE_THRESHOLD": "5"}
    settings = load_settings(flags={"chunking.max_tokens": 200}, env=env, cwd=tmp_path, home=tmp_path)
    assert settings["chunking.max_tokens"] == 200 and settings.origins["chunking.max_tokens"] == "flag"
    assert settings["summaries.message_threshold"] == 5
    assert settings.origins["summaries.message_threshold"] == "env SESSIONMEM_SUMMARIES__MESSAGE_THRESHOLD"
    assert settings["summaries.idle_minutes"] == 10
    assert settings.origins["summaries.idle_minutes"].endswith("sessionmem.toml")
    assert settings["llm.provider"] == "none" and settings.origins["llm.provider"] == "default"


def test_file_order_explicit_then_local_then_user(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".config" / "sessionmem").mkdir(parents=True)
    _write(home / ".config" / "sessionmem" / "config.toml", 'timezone = "Asia/Tokyo"\n')
    work = tmp_path / "work"
    work.mkdir()
    assert load_settings(env={}, cwd=work, home=home).timezone == "Asia/Tokyo"
    _write(work / "sessionmem.toml", 'timezone = "Europe/Berlin"\n')
    assert load_settings(env={}, cwd=work, home=home).timezone == "Europe/Berlin"
    explicit = _write(tmp_path / "other.toml", 'timezone = "America/Chicago"\n')
    assert load_settings(explicit, env={}, cwd=work, home=home).timezone == "America/Chicago"


def test_relative_paths_resolve_against_the_config_file_folder(tmp_path: Path) -> None:
    folder = tmp_path / "conf"
    folder.mkdir()
    config = _write(folder / "c.toml", 'warehouse = "data/w.duckdb"\nsources = ["logs", "/abs/root"]\n')
    settings = load_settings(config, env={}, cwd=tmp_path, home=tmp_path)
    assert settings.warehouse == folder / "data" / "w.duckdb"
    assert settings.sources == (folder / "logs", Path("/abs/root"))


def test_env_list_uses_the_path_separator(tmp_path: Path) -> None:
    settings = load_settings(env={"SESSIONMEM_SOURCES": f"{tmp_path}/a:{tmp_path}/b"}, cwd=tmp_path, home=tmp_path)
    assert settings.sources == (tmp_path / "a", tmp_path / "b")


def test_api_key_alone_never_switches_a_provider_on(tmp_path: Path) -> None:
    settings = load_settings(env={"OPENAI_API_KEY": "sk-live-1234567890"}, cwd=tmp_path, home=tmp_path)
    assert settings["embedding.provider"] == "local" and settings["llm.provider"] == "none"
    assert settings["embedding.api_key"] is None


def test_api_key_used_and_masked_once_openai_is_chosen(tmp_path: Path) -> None:
    env = {"OPENAI_API_KEY": "sk-live-1234567890", "SESSIONMEM_EMBEDDING__PROVIDER": "openai"}
    settings = load_settings(env=env, cwd=tmp_path, home=tmp_path)
    assert settings["embedding.api_key"] == "sk-live-1234567890"
    shown = {key: value for key, value, _ in settings.display()}
    assert "1234567890" not in shown["embedding.api_key"]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[embedding]\nprovider = 'cohere'\n", "embedding.provider must be one of"),
        ("colour = 'blue'\n", "unknown configuration key 'colour'"),
        ("[chunking]\nmax_tokens = 'many'\n", "chunking.max_tokens"),
        ("warehouse = [", "cannot read the config file"),
    ],
)
def test_bad_values_name_the_file_and_key(tmp_path: Path, text: str, fragment: str) -> None:
    config = _write(tmp_path / "bad.toml", text)
    with pytest.raises(ConfigError, match=fragment) as error:
        load_settings(config, env={}, cwd=tmp_path, home=tmp_path)
    assert "bad.toml" in str(error.value)


def test_bad_env_value_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="SESSIONMEM_SUMMARIES__ENABLED"):
        load_settings(env={"SESSIONMEM_SUMMARIES__ENABLED": "maybe"}, cwd=tmp_path, home=tmp_path)


def test_missing_explicit_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_settings(tmp_path / "nope.toml", env={}, cwd=tmp_path, home=tmp_path)
