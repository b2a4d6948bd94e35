"""Figures of the trigger stages: the attack with the mined triggers."""

from __future__ import annotations

import os

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from attnlab.report.figures import save_figure


def _planted_line(planted: dict[str, str] | None) -> str:
    if not planted:
        return "no planted trigger (not a synthetic task with triggers)"
    return "planted triggers: " + "; ".join(f"{name} = {words}" for name, words in planted.items())


# Inches of height per trigger: its three bars and its name, in 9-point type.
TRIGGER_HEIGHT = 0.55


def plot_attack(summary: pd.DataFrame, task: str, planted: dict[str, str] | None,
                path: str | os.PathLike) -> None:
    """Accuracy on the examples of the other classes before and after inserting each mined
    trigger, and after inserting random tokens at the same positions; the title names the task
    and the planted trigger of each class (synthetic tasks), and a mined trigger that is its
    class's planted one is labelled in green.

    summary: one row per trigger with columns trigger ("<class> #<rank>: <words>"),
    trigger_class, before, trigger_after, random_after.
    planted: class name -> its planted trigger's words, joined by a space; None without.
    """
    title = f"{task}: attack with the mined triggers\n{_planted_line(planted)}"
    if summary.empty:  # no pattern passed the mining's filters
        figure, ax = plt.subplots(figsize=(5.0, 2.0))
        ax.text(0.5, 0.5, "no triggers were mined", ha="center", va="center")
        ax.set_axis_off()
        figure.suptitle(title, fontsize=9)
        save_figure(figure, path)
        return
    long = summary.melt(id_vars="trigger", value_vars=["before", "trigger_after", "random_after"],
                        var_name="input", value_name="accuracy")
    long["input"] = long["input"].map({"before": "unchanged", "trigger_after": "with trigger",
                                       "random_after": "with random tokens"})
    # one row of bars per trigger, its name written level beside it: rotated names under
    # vertical bars took most of the figure's height and left the bars a strip
    figure, ax = plt.subplots(figsize=(8.0, TRIGGER_HEIGHT * len(summary) + 1.6))
    sns.barplot(data=long, y="trigger", x="accuracy", hue="input", ax=ax, orient="h",
                palette=["0.6", "tab:red", "tab:blue"])
    ax.set_xlim(0, 1.05)
    ax.set_ylabel("")
    ax.set_xlabel("accuracy on the dev examples of the other classes")
    ax.grid(axis="x", alpha=0.3)
    for label in ax.get_yticklabels():
        name, _, words = label.get_text().partition(" #")
        if planted and set(words.partition(": ")[2].split()) == set(planted.get(name, "").split()):
            label.set_color("tab:green")
            label.set_fontweight("bold")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # clear of the bars
    figure.tight_layout()
    save_figure(figure, path)
