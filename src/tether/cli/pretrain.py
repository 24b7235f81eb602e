"""``tether pretrain OUT``: train SAC or PPO on the built-in arm and write a bundle (thin layer)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from tether.errors import TetherError
from tether.learning.config import PPOConfig, SACConfig
from tether.learning.pretrain import EvalPoint, PretrainConfig, pretrain

_F = PretrainConfig.model_fields
_D = PretrainConfig()
_S = SACConfig.model_fields
_P = PPOConfig.model_fields
_HIDDEN_DEFAULT = ",".join(str(h) for h in _D.sac.hidden_sizes)


def _help(field: str) -> str:
    return str(_F[field].description)


def pretrain_command(
    out: Annotated[Path, typer.Argument(help="directory the bundle is written to")],
    algorithm: Annotated[str, typer.Option(help=_help("algorithm"))] = _D.algorithm,
    ppo_rollout_length: Annotated[
        int, typer.Option(help=f"PPO: {_P['rollout_length'].description}")
    ] = _D.ppo.rollout_length,
    ppo_epochs: Annotated[int, typer.Option(help=f"PPO: {_P['epochs'].description}")] = (
        _D.ppo.epochs
    ),
    ppo_minibatch_size: Annotated[
        int, typer.Option(help=f"PPO: {_P['minibatch_size'].description}")
    ] = _D.ppo.minibatch_size,
    total_env_steps: Annotated[
        int, typer.Option(help=_help("total_env_steps"))
    ] = _D.total_env_steps,
    time_budget_s: Annotated[float, typer.Option(help=_help("time_budget_s"))] = _D.time_budget_s,
    n_envs: Annotated[int, typer.Option(help=_help("n_envs"))] = _D.n_envs,
    learning_starts: Annotated[
        int, typer.Option(help=_help("learning_starts"))
    ] = _D.learning_starts,
    updates_per_step: Annotated[
        float, typer.Option(help=_help("updates_per_step"))
    ] = _D.updates_per_step,
    hidden: Annotated[
        str, typer.Option(help=f"{_S['hidden_sizes'].description}, comma-separated")
    ] = _HIDDEN_DEFAULT,
    batch_size: Annotated[
        int, typer.Option(help=str(_S["batch_size"].description))
    ] = _D.sac.batch_size,
    randomize: Annotated[bool, typer.Option(help=_help("randomize"))] = _D.randomize,
    randomization: Annotated[str, typer.Option(help=_help("randomization"))] = _D.randomization,
    eval_interval_steps: Annotated[
        int, typer.Option(help=_help("eval_interval_steps"))
    ] = _D.eval_interval_steps,
    eval_episodes: Annotated[int, typer.Option(help=_help("eval_episodes"))] = _D.eval_episodes,
    final_eval_episodes: Annotated[
        int, typer.Option(help=_help("final_eval_episodes"))
    ] = _D.final_eval_episodes,
    stop_success_rate: Annotated[
        float, typer.Option(help=f"{_help('stop_success_rate')}; above 1 never stops early")
    ] = _D.stop_success_rate or 1.01,
    seed: Annotated[int, typer.Option(help=_help("seed"))] = _D.seed,
    init_from: Annotated[Path | None, typer.Option(help=_help("init_from"))] = None,
    supervised: Annotated[bool, typer.Option(help=_help("supervised"))] = _D.supervised,
    intervention_penalty: Annotated[
        float, typer.Option(help=_help("intervention_penalty"))
    ] = _D.intervention_penalty,
    bc_weight: Annotated[
        float, typer.Option(help=str(_S["bc_weight"].description))
    ] = _D.sac.bc_weight,
    command_interface: Annotated[
        str, typer.Option(help=_help("command_interface"))
    ] = _D.command_interface,
    demonstration_episodes: Annotated[
        int, typer.Option(help=_help("demonstration_episodes"))
    ] = _D.demonstration_episodes,
    demonstration_noise: Annotated[
        float, typer.Option(help=_help("demonstration_noise"))
    ] = _D.demonstration_noise,
    bc_updates: Annotated[int, typer.Option(help=_help("bc_updates"))] = _D.bc_updates,
    dagger_rounds: Annotated[int, typer.Option(help=_help("dagger_rounds"))] = _D.dagger_rounds,
    clone_std: Annotated[float, typer.Option(help=_help("clone_std"))] = _D.clone_std,
    initial_alpha: Annotated[
        float, typer.Option(help=str(_S["initial_alpha"].description))
    ] = _D.sac.initial_alpha,
    target_entropy: Annotated[
        float | None, typer.Option(help=str(_S["target_entropy"].description))
    ] = _D.sac.target_entropy,
    critic_warmup_updates: Annotated[
        int, typer.Option(help=_help("critic_warmup_updates"))
    ] = _D.critic_warmup_updates,
    threads: Annotated[int, typer.Option(help="torch intra-op threads (threads)")] = 1,
    overwrite: Annotated[bool, typer.Option(help="replace an existing bundle at OUT")] = False,
) -> None:
    """Train SAC (or PPO: --algorithm ppo) on tether/Arm-v0 with domain randomization and write the best policy as a bundle.

    For the position interface, --demonstration-episodes starts from a behaviour-cloned
    scripted controller (docs/learning.md has the command that made the shipped bundle).
    """
    import torch

    torch.set_num_threads(threads)
    console = Console()
    try:
        hidden_sizes = tuple(int(h) for h in hidden.split(","))
        config = PretrainConfig(
            algorithm=algorithm,  # type: ignore[arg-type]  # validated here
            ppo=PPOConfig.model_validate(
                {
                    **_D.ppo.model_dump(),
                    "hidden_sizes": hidden_sizes,
                    "rollout_length": ppo_rollout_length,
                    "epochs": ppo_epochs,
                    "minibatch_size": ppo_minibatch_size,
                    "seed": seed,
                }
            ),
            sac=SACConfig(
                hidden_sizes=hidden_sizes,
                batch_size=batch_size,
                seed=seed,
                bc_weight=bc_weight,
                target_entropy=target_entropy,
                initial_alpha=initial_alpha,
            ),
            total_env_steps=total_env_steps,
            time_budget_s=time_budget_s,
            n_envs=n_envs,
            learning_starts=learning_starts,
            updates_per_step=updates_per_step,
            randomize=randomize,
            randomization=randomization,  # type: ignore[arg-type]  # validated here
            eval_interval_steps=eval_interval_steps,
            eval_episodes=eval_episodes,
            final_eval_episodes=final_eval_episodes,
            stop_success_rate=None if stop_success_rate > 1 else stop_success_rate,
            seed=seed,
            init_from=init_from,
            supervised=supervised,
            intervention_penalty=intervention_penalty,
            command_interface=command_interface,  # type: ignore[arg-type]  # validated here
            demonstration_episodes=demonstration_episodes,
            demonstration_noise=demonstration_noise,
            bc_updates=bc_updates,
            dagger_rounds=dagger_rounds,
            clone_std=clone_std,
            critic_warmup_updates=critic_warmup_updates,
        )
    except ValueError as exc:
        Console(stderr=True).print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        raise typer.Exit(code=2) from exc

    with Progress(
        TextColumn("pretrain"),
        BarColumn(),
        TextColumn("{task.completed:.0f}/{task.total:.0f} steps"),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
        console=console,
        transient=False,
    ) as progress:
        first = (
            "demonstrations and behaviour cloning (the clone is evaluated at step 0)"
            if config.demonstration_episodes
            else "collecting"
        )
        task = progress.add_task("pretrain", total=config.total_env_steps, status=first)

        def on_progress(steps: int, point: EvalPoint | None) -> None:
            if point is None:
                progress.update(task, completed=steps)
                return
            r = point.result
            status = (
                f"eval: success {r.success_rate:.0%} return {r.mean_return:.1f} "
                f"distance {r.mean_final_distance_m:.3f} m"
            )
            progress.update(task, completed=steps, status=status)
            progress.console.print(
                f"steps={point.env_steps} episodes={point.episodes} updates={point.updates} "
                f"t={point.elapsed_s:.0f}s {status}",
                markup=False,
                highlight=False,
            )

        try:
            result = pretrain(config, out, on_progress=on_progress, overwrite=overwrite)
        except TetherError as exc:
            Console(stderr=True).print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
            raise typer.Exit(code=1) from exc
    f = result.final
    console.print(
        f"final success rate {f.success_rate:.0%} over {f.episodes} nominal-arm episodes "
        f"(return {f.mean_return:.1f}, final distance {f.mean_final_distance_m:.3f} m); "
        f"{result.env_steps} steps, {result.episodes} episodes, {result.updates} updates, "
        f"{result.elapsed_s:.0f} s; bundle: {result.bundle.path}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def register(app: typer.Typer) -> None:
    app.command(
        name="pretrain", help="Pretrain SAC or PPO on the built-in arm and write a policy bundle."
    )(pretrain_command)
