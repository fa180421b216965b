"""Per-target recipes, one folder each: `recipe.yaml` (a Hydra config applied at the global
package, selected with `+recipe=NAME`) and the README that documents its split, memory budget and
throughput. `store_recipes` makes every folder's recipe a Hydra config-group option, so adding a
recipe is adding a folder."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent


def recipe_dirs() -> list[Path]:
    return sorted(p for p in HERE.iterdir() if (p / "recipe.yaml").is_file())


def store_recipes() -> None:
    """Register `recipe/<folder name>` in Hydra's ConfigStore for every recipe folder."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    store = ConfigStore.instance()
    for folder in recipe_dirs():
        store.store(
            group="recipe",
            name=folder.name,
            node=OmegaConf.load(folder / "recipe.yaml"),
            package="_global_",
        )
