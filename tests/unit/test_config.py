from studio.config import StudioSettings, load_settings


def test_env_prefix_and_flag_override(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("OMNI_STUDIO_PORT=7000\nOMNI_STUDIO_DEFAULT_TIER=720p\n")
    monkeypatch.setenv("OMNI_STUDIO_PORT", "7100")
    monkeypatch.setenv("OMNI_STUDIO_REMOTE_URLS", "http://a:8000, http://b:8000/v1")
    settings = load_settings(port=None, tensor_parallel_size=4)
    assert settings.port == 7100  # env beats .env
    assert settings.default_tier == "720p"  # .env beats the default
    assert settings.tensor_parallel_size == 4
    assert settings.remote_urls == ["http://a:8000", "http://b:8000/v1"]
    assert load_settings(port=7200).port == 7200  # flags beat env


def test_api_key_is_secret():
    settings = StudioSettings(_env_file=None, api_key="sk-123")
    assert "sk-123" not in repr(settings) and settings.api_key_value() == "sk-123"
