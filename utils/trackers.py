"""wandb / TensorBoard through Accelerate's trackers: set up on the main process, fed the metrics.jsonl rows."""

import os

TRACKERS = {"none": [], "wandb": ["wandb"], "tensorboard": ["tensorboard"], "all": ["wandb", "tensorboard"]}


def check_wandb_login(report_to):
    """Online wandb without a login would fail after the job is half set up: say so first, in one line."""
    if "wandb" not in TRACKERS[report_to] or os.environ.get("WANDB_MODE") in ("offline", "disabled", "dryrun"):
        return None
    if _has_wandb_key():
        return None
    return ("report_to: wandb is online but not logged in: run `wandb login` (or set WANDB_API_KEY), or log "
            "offline with WANDB_MODE=offline and `wandb sync` later")


def _has_wandb_key():
    import netrc

    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        auth = netrc.netrc(os.environ.get("NETRC") or os.path.expanduser("~/.netrc"))
    except (FileNotFoundError, netrc.NetrcParseError):
        return False
    host = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai").split("//")[-1].split("/")[0]
    return auth.authenticators(host) is not None


def start(accelerator, args, out, config, run_id=None):
    """Create the runs (main process only, inside Accelerate); returns the wandb run id, if any."""
    if not TRACKERS[args.report_to]:
        return None
    accelerator.project_configuration.logging_dir = str(out)  # TensorBoard writes <out>/<project_name>
    wandb_kwargs = {"name": args.run_name or out.name, "dir": str(out), "entity": args.wandb_entity,
                    "tags": args.wandb_tags, "id": run_id or args.wandb_run_id, "resume": "allow"}
    accelerator.init_trackers(args.project_name, config=config, init_kwargs={"wandb": wandb_kwargs})
    if "wandb" in TRACKERS[args.report_to] and accelerator.is_main_process:
        return accelerator.get_tracker("wandb", unwrap=True).id
    return None
