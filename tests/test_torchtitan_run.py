"""The TorchTitan harness (`make torchtitan`) without a TorchTitan checkout: what it says when it
has none, and that it reads the losses TorchTitan logs (colours and all)."""
import subprocess
import sys
from pathlib import Path

import torchtitan_run

SCRIPT = Path(__file__).with_name("torchtitan_run.py")


def test_without_a_checkout_it_says_how_to_get_one_and_passes():
    out = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "skipped" in out.stdout and f"checkout {torchtitan_run.COMMIT}" in out.stdout
    assert "tyro" in out.stdout


def test_a_path_that_is_no_checkout_is_an_error_naming_it(tmp_path):
    out = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert f"{tmp_path} is not a TorchTitan checkout" in out.stdout


def test_reads_the_losses_torchtitan_logs():
    # TorchTitan's MetricsProcessor line, with the terminal colours it writes
    line = ("[rank0]:[titan] 2026-12-07 02:04:29,894 - root - INFO - \x1b[31mstep:  9  \x1b[32mloss:  5.65265  "
            "\x1b[38;2;180;60;0mgrad_norm:  2.3698  \x1b[34mtps: 2,386\x1b[39m")
    text = torchtitan_run._ANSI.sub("", line + "\n" + line.replace("step:  9", "step: 10").replace("5.65265", "5.5"))
    assert {int(s): float(v) for s, v in torchtitan_run._STEP.findall(text)} == {9: 5.65265, 10: 5.5}


def test_stand_in_dataset_is_c4_shaped(tmp_path):
    import json

    path = torchtitan_run._stand_in_dataset(tmp_path)
    rows = [json.loads(line) for line in (path / "data.json").read_text().splitlines()]
    assert len(rows) > 100 and all(set(r) == {"text"} and len(r["text"]) > 200 for r in rows)


def _run(name):
    return next(r for r in torchtitan_run.RUNS if r.name == name)


def _neuron_and_cpu_args(run, tmp_path):
    base = torchtitan_run._titan_args(10, 256, 2, None, tmp_path / "dump", tmp_path / "seed")
    return torchtitan_run._run_args(run, "neuron", base), torchtitan_run._run_args(run, "cpu", base)


def test_activation_checkpointing_rows_choose_their_policy_last(tmp_path):
    # tyro gives the options after a subcommand to the chosen class: the policy must close the list
    for name, want in (("FSDP 2", "SelectiveAC"), ("FSDP 2 full AC", "FullAC"), ("FSDP 2 no AC", None)):
        run = _run(name)
        for args in _neuron_and_cpu_args(run, tmp_path):
            assert args[-1].startswith("activation-checkpoint:") or want == "SelectiveAC", args
            assert "--parallelism.data_parallel_shard_degree" in args
        assert torchtitan_run._ac_policy(run.args) == want
    compiled = _neuron_and_cpu_args(_run("compile"), tmp_path)[0]
    args = torchtitan_run._ordered([*compiled, "activation-checkpoint:full", "--x.y", "1"])
    assert args[-1] == "activation-checkpoint:full" and args[-3:-1] == ["--x.y", "1"]


def test_a_policy_the_log_does_not_show_is_a_problem():
    log = "[rank0]:[titan] ... - root - INFO - Applied {} activation checkpointing to the model\n"
    full = ("activation-checkpoint:full",)
    assert torchtitan_run._ac_problems(full, log.format("FullAC")) == []
    assert torchtitan_run._ac_problems((), log.format("SelectiveAC")) == []
    assert "FullAC" in torchtitan_run._ac_problems(full, log.format("SelectiveAC"))[0]
    assert torchtitan_run._ac_problems(("activation-checkpoint:none",), "no such line") == []
    assert torchtitan_run._ac_problems(("activation-checkpoint:none",), log.format("SelectiveAC"))
    assert torchtitan_run._ac_problems((), "no such line")


def test_resume_row_saves_at_its_step_on_neuron_only(tmp_path):
    run = _run("FSDP 2 resume")
    neuron, cpu = _neuron_and_cpu_args(run, tmp_path)
    assert neuron[neuron.index("--checkpoint.interval") + 1] == str(run.resume_at)
    assert cpu[cpu.index("--checkpoint.interval") + 1] == "11"  # the CPU reference saves no step-k
    assert neuron.count("--checkpoint.interval") == 1 and "--checkpoint.enable" in neuron


def _resume_log(checkpoint, start):
    return (f"INFO - Loading the checkpoint from {checkpoint}.\nINFO - Finished loading the checkpoint in 0.1 "
            f"seconds.\nINFO - Training starts at step {start}\n")


def test_resume_comparison_fails_on_anything_but_the_same_losses_from_the_saved_step(tmp_path):
    full = {s: 8.0 - 0.25 * s for s in range(1, 11)}
    ckpt = tmp_path / "checkpoint" / "step-5"
    resumed = {s: full[s] for s in range(6, 11)}
    check = torchtitan_run._resume_problems
    assert check(full, resumed, _resume_log(ckpt, 6), ckpt, 5, 10) == []
    # one loss off in the last printed digit
    off = {**resumed, 8: resumed[8] + 1e-5}
    assert "step" in check(full, off, _resume_log(ckpt, 6), ckpt, 5, 10)[0] and "8 (" in check(
        full, off, _resume_log(ckpt, 6), ckpt, 5, 10)[0]
    # trained from the seed instead: starts at step 1 and logs every step
    assert len(check(full, dict(full), _resume_log(tmp_path / "seed", 1), ckpt, 5, 10)) == 3
    # loaded another step
    assert check(full, resumed, _resume_log(ckpt.with_name("step-10"), 6), ckpt, 5, 10)
    # stopped early or failed
    assert check(full, {6: full[6], 7: full[7]}, _resume_log(ckpt, 6), ckpt, 5, 10)
    assert check(full, {**resumed, "rc": 1}, _resume_log(ckpt, 6), ckpt, 5, 10)
