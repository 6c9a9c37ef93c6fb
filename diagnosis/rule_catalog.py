# ruff: noqa: E501
"""Every rule's title and doc, marked for translation (generated: do not edit).

Written by ``python manage.py rule_catalog`` from the rule registry (diagnosis/rule_text.py):
``makemessages`` reads these literals; pages translate the English text with the ``core_text``
filter.
"""

from django.utils.translation import gettext_noop

RULE_TEXT: dict[str, tuple[str, ...]] = {
    "data-starvation": (
        # xgettext:no-python-format
        gettext_noop("GPUs starved of input data"),
        gettext_noop(
            # xgettext:no-python-format
            "A running job started at least `min_runtime` ago that holds GPU memory (mean `fb_used_frac.mean` ≥ `min_fb_used`) but whose mean `util.mean` lies in [`min_util`, `max_util`), and either its utilisation is bursty (mean of `util.p90 - util.p10` ≥ `min_burst_spread`: compute waits for input, then sprints) or the busiest of its nodes has `cpu_util` ≥ `min_host_cpu` (the input pipeline is CPU-bound). Jobs whose metrics cannot settle it are counted under *not judged*: no utilisation, no framebuffer metric, or neither trigger true while one of them is unknown."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "The GPUs are allocated and loaded with a model, yet spend much of the window waiting for the next batch: GPU-hours land in the `allocated-data-starved` bucket of the breakdown. Feeding the GPUs faster usually recovers them with no extra hardware."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "Raise the data loader's parallelism (PyTorch `DataLoader(num_workers=..., pin_memory=True, prefetch_factor=...)`, `tf.data` `.prefetch(AUTOTUNE)` and parallel `map`), move decoding / augmentation to the GPU (NVIDIA DALI), cache or pre-shard the data set on local NVMe, and ask for more CPU cores per GPU when the host CPU is saturated. Low PCIe RX in the evidence means the data never reaches the GPU fast enough; check the storage path first."
        ),
    ),
    "ecc-row-remap": (
        # xgettext:no-python-format
        gettext_noop("GPU memory rows remapped or failing to remap"),
        gettext_noop(
            # xgettext:no-python-format
            "A GPU whose row remapper (A100 and newer) reports, in the window: a pending remap (`row_remap.pending` ≥ 1, DCGM_FI_DEV_ROW_REMAP_PENDING), a remap failure (`row_remap.failure` ≥ 1, DCGM_FI_DEV_ROW_REMAP_FAILURE), or rows newly remapped for uncorrectable ECC errors (`row_remap.uncorrectable` > 0: the growth of DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS over the window). Critical on a failure, warning otherwise. Nothing to tune: any of these is a fact about the memory. A GPU reporting none of the three fields is not judged (counted), never called healthy."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "An uncorrectable ECC error kills the process that touched the row (Xid 48/94/95) and marks the row for remapping; the remap takes effect only when the GPU is reset, so until then the same bad row can fail the next job placed there. A failed remap (the bank's spare rows are used up) means the GPU cannot repair itself: jobs keep dying on it until it is replaced. Draining first costs the node's capacity for minutes; not draining costs every job that lands there."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "Drain the node (gpuobs proposes it: the `drain-node` recommendation), wait for its jobs to leave, then reset the GPU (`nvidia-smi -r -i <index>`, or reboot) so the pending remap is applied; check `nvidia-smi -q -d ROW_REMAPPER` shows no pending remap and no failure before returning the node. On a remap failure, or when remaps keep coming, open a service case (RMA) with NVIDIA's field diagnostic."
        ),
    ),
    "fragmentation": (
        # xgettext:no-python-format
        gettext_noop("Free GPUs too scattered for pending jobs"),
        gettext_noop(
            # xgettext:no-python-format
            "A pool in which some pending job with no allocation has waited at least `min_wait` although the pool's free GPUs add up to its request: the job is not *placeable* (for its `gpus_per_pod` = s, `sum over nodes of floor(free(n) / s) < pods`), and its queue's capability (if set) would not be exceeded by admitting it (GPUs the queue's jobs hold now + the request <= `capability_gpus`). Critical when the blocked demand is at least `critical_demand_frac` of the pool's GPUs. Jobs without a pool are judged against every node and reported under the cluster's only pool, or `cluster:<name>` when there are several."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "Free GPUs that no waiting job can use are paid for and idle, while the jobs wait: a spread placement policy leaves a few free GPUs on many nodes, and a job asking for whole 8-GPU nodes never starts. The FGD paper measured 7–13% of all GPUs fragmented under common policies on a real trace."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "Switch the pool's GPU placement to binpack (Volcano: binpack plugin with a weight for `nvidia.com/gpu`; Kubernetes: `NodeResourcesFit` `MostAllocated`; Slurm: `CR_Pack_Nodes` / `LLN=NO`), so small jobs fill nodes before opening new ones. For a quick recovery, drain a few nearly empty nodes of their small jobs (preempt or migrate) so that whole nodes become free."
        ),
    ),
    "gang-deadlock": (
        # xgettext:no-python-format
        gettext_noop("Partial gangs deadlocked on each other's GPUs"),
        gettext_noop(
            # xgettext:no-python-format
            "A set D of at least two *partial gangs* (pending gang jobs with `0 < bound pods < min_member`) of one pool, each holding its GPUs for at least `min_hold`, where no member's missing pods (`min_member - bound`) are placeable on the free GPUs, but every member's missing pods would be placeable on the free GPUs plus the GPUs held by the other members of D (per node: `free(n) + held by the others on n`).\n\nHow the sets are found: whether every member would fit with the others' GPUs can only get better as D grows, so the largest such set is unique. It is found by starting from every candidate (partial gang held long enough that cannot complete on free GPUs) and removing, round by round, every member that would not fit with the GPUs of the remaining others, until a round removes nothing. That set is then split so that unrelated deadlocks are reported apart: gangs holding GPUs on a common node start in one part, and a part in which some member would not fit with the GPUs of its own part is merged with the parts holding GPUs on the nodes where that member would find room, until every part is a deadlock on its own (at worst the whole set, which is one). So two pairs of gangs, each pair stuck on its own node, are two findings, each naming the gangs of which one must give way. A gang that would not fit even with all the others' GPUs is not in a set: it is reported by `gang-partial-hold`."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "Critical by default: no member can ever start on its own, every member's GPUs are held idle, and the set stays stuck until one gang gives up its pods — schedulers without gang admission (or with a long timeout) will wait forever, while other work cannot use the held GPUs either. It costs the pool `gpus_held` GPUs for as long as it lasts, and it does not resolve with time the way a plain partial hold may when running jobs end."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "Release one member (preempt or delete the gang with the lowest priority or the fewest bound pods) so the others can complete. To prevent it: admit gangs atomically (Volcano `gang` plugin with `minAvailable`, Kueue `waitForPodsReady` with a timeout and requeueing, Slurm allocates jobs whole) and set a gang scheduling timeout so a partial gang releases its pods."
        ),
    ),
    "gang-partial-hold": (
        # xgettext:no-python-format
        gettext_noop("Partial gang holding GPUs it cannot use"),
        gettext_noop(
            # xgettext:no-python-format
            "A *partial gang* — a pending gang job with `0 < bound pods < min_member` — that has held its GPUs for at least `min_hold` and whose missing pods (`min_member - bound`) are not placeable on the free GPUs of its pool, and that is not a member of a `gang-deadlock` set (found with this rule's own `min_hold`)."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "A gang runs only when all its `min_member` pods are bound; until then the pods it holds do no work, and the GPUs under them are lost to every other job. Schedulers that bind gangs pod by pod (or with a long gang timeout) can keep GPUs in this state for hours."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "Give the gang its missing capacity (preempt lower-priority work, or binpack the pool so whole nodes free up), or release its pods and requeue it whole. Prevent it with atomic gang admission (Volcano `gang` plugin, Kueue `waitForPodsReady` with a timeout) and a gang scheduling timeout."
        ),
    ),
    "hung-collective": (
        # xgettext:no-python-format
        gettext_noop("GPUs spinning in a hung collective"),
        gettext_noop(
            # xgettext:no-python-format
            "A running job holding at least `min_gpus` GPUs, started at least `min_runtime` ago, whose GPUs **all** show `util.mean` ≥ `min_util` while the mean over its GPUs of `power_w.mean` divided by the GPU's power limit is ≤ `max_power_frac`, the mean `tensor_active.mean` is ≤ `max_tensor` and, where reported, the mean `dram_active.mean` is ≤ `max_dram`. The power limit is the GPU's `power_limit_w.max` (DCGM_FI_DEV_POWER_MGMT_LIMIT) where reported, else the TDP of its model (`TDP_WATTS` beside the peak TFLOP/s table). The statistics are means over the snapshot's window (15 min by default), so a finding says the signature held over that stretch; `for` (10 min) keeps a single window from raising it. Not judged (counted): a job whose GPUs are all busy as far as reported but some GPU has no utilisation reading; a job with no power reading with a known limit; a job with no tensor activity metric. A job any of whose GPUs is below `min_util`, or whose known power, tensor or DRAM activity is above its threshold, is judged not hung."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "A rank stuck in an NCCL collective (a peer died, a network path broke, ranks disagree on the collective) keeps a kernel spinning on every GPU of the job: the utilisation counter reads ~100% while the GPUs draw little power and the tensor pipes and memory are idle. The job makes no progress and, unless NCCL's timeout is set, never ends, so every GPU-hour it holds is lost while dashboards show it as the busiest job of the cluster. The GPU-hour breakdown counts its GPUs as `allocated-hung`, not `allocated-busy`."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "Tell the owner; take a stack dump of a rank (`py-spy dump --pid ...`) to see which collective it waits in, then cancel or requeue the job from its last checkpoint. Prevent the next one from hanging for hours: set the process group timeout (`torch.distributed.init_process_group(timeout=...)`) with `TORCH_NCCL_ASYNC_ERROR_HANDLING=1` (older: `NCCL_ASYNC_ERROR_HANDLING=1`) so a hung collective raises instead of spinning, and a watchdog on training progress. Check the job's nodes for Xids and NIC errors."
        ),
    ),
    "idle-allocation": (
        # xgettext:no-python-format
        gettext_noop("GPUs allocated but idle"),
        gettext_noop(
            # xgettext:no-python-format
            "A running job started at least `min_runtime` ago whose GPUs' mean utilisation (the mean over its GPUs of their window `util.mean`) is below `max_util`. GPUs without a utilisation reading are left out of the mean; a job none of whose GPUs has one is not judged (counted under *not judged*), never called idle or healthy. A job whose GPUs' mean `fb_used_frac.mean` is at least `held_fb` is `idle-held`'s finding instead (memory loaded, compute idle: a notebook), so an idle job gets one finding; a job without a framebuffer reading stays here."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "An idle allocation holds GPUs other jobs are waiting for: every hour of it is a GPU-hour in the `allocated-idle` bucket of the breakdown. Typical causes: a notebook or debugging session left open, a job hung on a collective or on I/O, a service scaled for a peak that is not there."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "Ask the owner (tenant in the evidence) whether the job is still needed; stop or shrink it, or give interactive sessions an idle timeout. If the job should be busy, check its logs for a hang (NCCL timeout, stuck data loader). Unhealthy GPUs or nodes that are not ready in the evidence point at a hardware cause instead."
        ),
    ),
    "idle-held": (
        # xgettext:no-python-format
        gettext_noop("GPU memory held by an idle job"),
        gettext_noop(
            # xgettext:no-python-format
            "A running job started at least `min_runtime` ago whose GPUs' mean `fb_used_frac.mean` is at least `min_fb` while their mean `util.mean` is below `max_util`: memory loaded (a model, a kernel's tensors), compute idle. This is the memory-holding part of `idle-allocation`, which leaves such jobs to this rule (its `held_fb` threshold, default equal to `min_fb`): one idle job, one finding. Not judged (counted): a job with no utilisation reading on any GPU; an idle job with no framebuffer reading (`idle-allocation` judges it)."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "Interactive sessions — Jupyter kernels, debuggers, an `ipython` with a model loaded — keep their GPUs and memory for hours between bursts of work. The GPUs cannot go to a waiting job, and because memory is in use they do not look free to people scanning `nvidia-smi`. Their GPU-hours are `allocated-idle`."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "Ask the owner to save and shut the kernel, or give interactive sessions an idle culler: JupyterHub `jupyterhub-idle-culler --timeout=3600`, Jupyter Server `MappingKernelManager.cull_idle_timeout` with `cull_connected`; a time limit on interactive partitions (Slurm `MaxTime` on the partition); or move notebooks to MIG slices or time-sliced GPUs so an idle one holds a fraction of a GPU."
        ),
    ),
    "idle-quota": (
        # xgettext:no-python-format
        gettext_noop("Guaranteed GPUs held idle while other queues wait"),
        gettext_noop(
            # xgettext:no-python-format
            "A queue with a guarantee (`deserved_gpus` > 0) whose running jobs, started at least `min_runtime` ago, hold GPUs with a mean `util.mean` below `max_util`, while pending jobs of **other** queues, in a pool where those GPUs are (a job with no pool may use any), ask for no more GPUs than the queue holds there. GPUs are compared by count, not by shape. Warning when the queue holds more than its guarantee (it borrows what it does not use), info when it is within it. The rule is stored as firing only after an hour of consecutive hits (`for` 1 h): the idleness has lasted an hour. A queue without a guarantee is left to `idle-allocation`; a queue whose held GPUs have no utilisation reading is not judged (counted)."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "Quota systems (Kueue ClusterQueue nominal quota and borrowing, Volcano `deserved` and reclaim, KAI's guaranteed quota) let a queue keep or borrow GPUs other teams need. An idle queue that keeps them turns guaranteed capacity into idle GPU-hours while the waiting queues starve — and the scheduler does not reclaim borrowed quota unless reclaim is enabled."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "Reclaim: ask the queue's owner to release the jobs in `idle_jobs`, or let the scheduler take the GPUs back — Kueue `preemption.reclaimWithinCohort: Any` (and `borrowWithinCohort`) on the ClusterQueues of the cohort; Volcano's `reclaim` action with the `proportion` plugin and `reclaimable: true` on the queue; KAI's reclaim of over-quota resources. If the guarantee is larger than the team needs, lower its `deserved` / nominal quota."
        ),
    ),
    "low-mfu": (
        # xgettext:no-python-format
        gettext_noop("Busy training job with low model FLOPs utilisation"),
        gettext_noop(
            # xgettext:no-python-format
            "A running `training` job started at least `min_runtime` ago whose GPUs are busy (mean `util.mean` ≥ `min_util`) but whose model FLOPs utilisation is below `min_mfu`. MFU is `achieved_tflops_per_gpu / peak` when the job reports its TFLOP/s and the peak dense BF16 TFLOP/s of its GPU model is known (method `reported_tflops`); otherwise the mean `tensor_active.mean` of its GPUs stands in for it (method `tensor_active_proxy`; also when the job reports TFLOP/s on a GPU model whose peak is unknown, with a note saying so). A job with neither is not judged."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "High utilisation only says a kernel was running; MFU says how much of the GPU's arithmetic the job turns into training progress. A busy job at low MFU pays full price for its GPU-hours and gets a fraction of the work: often recoverable with software settings alone."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "Profile one step (PyTorch profiler, Nsight Systems). Usual remedies: BF16/FP8 mixed precision, fused kernels (FlashAttention, fused optimisers), larger micro-batches or gradient accumulation, activation checkpointing to afford them, overlap of communication with compute, `torch.compile`, and a parallelism layout that keeps tensor parallelism inside NVLink (see `topology-misplacement`)."
        ),
    ),
    "power-throttling": (
        # xgettext:no-python-format
        gettext_noop("GPU clocks held down by the power cap"),
        gettext_noop(
            # xgettext:no-python-format
            "A GPU whose `throttle_power.frac` — the share of the window its clocks were held down by power — is at least `min_frac`. The edge takes it from DCGM's clock-event reasons (the share of samples with `sw_power_cap` 0x4 or `hw_power_brake` 0x80 set in DCGM_FI_DEV_CLOCKS_EVENT_REASONS), or else from the growth of DCGM_FI_DEV_POWER_VIOLATION (µs) over the window. Warning when a job holds the GPU, info when it is free. A GPU with neither field is not judged (counted)."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "A GPU at its power cap lowers its clocks to stay under it: heavy kernels run slower than the hardware allows. A cap set below the model's TDP (the evidence's `power_limit_w`), a rack power budget or an external power brake (`hw_power_brake`: the PSU or BMC asked for it) costs throughput on every job placed there, and the slowest GPU sets the pace of a synchronous gang."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "Compare `power_limit_w` with the model's TDP: `nvidia-smi -q -d POWER` shows the enforced and default limits; restore the default with `nvidia-smi -pl <watts>` (or the DCGM policy / GPU operator setting that lowered it). For `hw_power_brake`, check the node's power supplies and the BMC's power capping. If the cap is deliberate (a rack budget), expect the lower throughput and place gangs on uncapped nodes."
        ),
    ),
    "preemption-thrash": (
        # xgettext:no-python-format
        gettext_noop("Job preempted over and over"),
        gettext_noop(
            # xgettext:no-python-format
            "A job (any state) preempted at least `min_preemptions` times within the last `window` seconds. Preemptions are the snapshot's `preempted` events of the job dated inside the window; for a job submitted inside the window its own `preemptions` counter counts too (all of them happened inside it), whichever is larger. A job submitted before the window whose counter reaches `min_preemptions` but whose events in the window do not is not judged (counted): the counter cannot say when they happened."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "Every preemption kills the job's pods; it restarts from its last checkpoint and repeats the work since then, on top of the restart itself (scheduling, image pull, loading the model and data). A job preempted every hour with a two-hour checkpoint interval never progresses, and the GPUs it held in between did work that was thrown away. It usually means priorities or quotas that let two workloads take the same GPUs from each other in turn."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "Look at who preempted it (`preempted_by`): give the job a priority class that the preemptor cannot preempt, or a non-preemptible guarantee (Kueue nominal quota without `borrowWithinCohort` preemption; Volcano `preemptable: false` / queue `reclaimable: false`; Slurm `PreemptExemptTime` to protect a job's first minutes). Checkpoint more often than it is preempted. If the preemptor is itself preempted back, fix the priority or quota cycle between the two queues."
        ),
    ),
    "starvation": (
        # xgettext:no-python-format
        gettext_noop("Pending job overtaken by later jobs"),
        gettext_noop(
            # xgettext:no-python-format
            "A pending job with no allocation that has waited at least `min_wait` while at least `min_overtaken` jobs of the same pool, submitted after it, have started since it was submitted (`started >= its submitted`; they may have finished since). The `cause` is, in this order: `priority` if at least half of the overtakers had a higher priority; `size` if its request (pods × gpus_per_pod) is at least 4× the overtakers' median request; `share` if its tenant holds less than it deserves (GPUs allocated now to the tenant's jobs < the sum of `deserved_gpus` of the tenant's queues, judged only when some deserved is set); else `order`."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "A job that the scheduler keeps passing over may never run: large gangs wait for whole nodes that small jobs keep taking, low-priority work waits behind a stream of higher-priority work, and an under-served tenant's queue loses to others. Users see it as a hung submission."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "By cause: `priority` — raise the job's priority or cap the higher class; `size` — reserve or backfill-protect capacity for large jobs (Volcano `reserve`/`sla` plugins, Slurm backfill with reservations, Kueue `BestEffortFIFO` → `StrictFIFO`); `share` — raise the queue's weight toward its fair share; `order` — check the queue's ordering policy and the job's constraints (pending reason)."
        ),
    ),
    "thermal-throttling": (
        # xgettext:no-python-format
        gettext_noop("GPU clocks held down by temperature"),
        gettext_noop(
            # xgettext:no-python-format
            "A GPU whose `throttle_thermal.frac` — the share of the window its clocks were held down for thermal reasons — is at least `min_frac`. The edge takes it from DCGM's clock-event reasons (the share of samples with `sw_thermal` 0x20 or `hw_thermal` 0x40 set in DCGM_FI_DEV_CLOCKS_EVENT_REASONS), or else from the growth of DCGM_FI_DEV_THERMAL_VIOLATION (µs) over the window. Warning when a job holds the GPU, info when it is free. A GPU with neither field is not judged (counted), never called cool."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "A thermally throttled GPU runs its SMs below their rated clock: the job on it computes slower, and in a synchronous job (data or tensor parallel) every other GPU waits for the slowest one, so one hot GPU slows the whole gang. The cause is in the machine room, not the job."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "Check the node's cooling: fan and pump health and inlet air temperature (`nvidia-smi -q -d TEMPERATURE,PERFORMANCE`, the BMC's sensors), blocked or missing blanking panels, a failed fan, the rack's airflow. Compare with its neighbours; if one GPU keeps throttling where others do not, have it serviced. Drain the node meanwhile if its jobs are gangs."
        ),
    ),
    "topology-misplacement": (
        # xgettext:no-python-format
        gettext_noop("Job placed across NVLink, NUMA or node boundaries"),
        gettext_noop(
            # xgettext:no-python-format
            "A running job holding ≥ 2 GPUs whose placement costs bandwidth it need not lose: (a) `parallelism.tp` is given and a TP group (consecutive `tp` GPUs of the allocation, in allocation order) spans more than one node (`tp-cross-node`; GPUs of one multi-node NVLink clique, `gpus[].nvlink_clique` as on GB200/GB300 NVL72, count as one domain, so a group inside one clique does not cross) or more than one NVLink domain (`tp-cross-nvlink`; a GPU listed alone has no NVLink peer); (b) a pod's GPUs span NVLink domains although its node has a domain at least as large as the pod, counting all of the domain's GPUs, busy or not (`pod-cross-nvlink`); (c) the job uses more nodes than `ceil(pods / floor(G / gpus_per_pod))`, with G the largest GPU count among its nodes (`spread-across-nodes`); (d) a pod's GPUs span NUMA nodes although its node has a NUMA node with at least as many GPUs as the pod (`cross-numa`; not checked where NUMA is unknown, counted under *not judged*). A node without topology data is never taken for \"PCIe only\": (a)'s NVLink check and (b) are not judged for GPUs whose NVLink domain is unknown (counted under *not judged*), while the node boundary of (a) and (c) is still judged; likewise for a GPU whose index an adapter guessed (`index_guessed`) on a node with more than one NVLink domain (NUMA node). One finding per job: warning when (a) or (b) applies, info for (c) or (d) alone."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "Tensor parallelism exchanges activations at every layer: inside an NVLink domain that traffic moves at hundreds of GB/s, across PCIe or the network at a fraction of it, and the whole job waits for the slowest link. Pods split across domains or NUMA nodes, and jobs spread over more nodes than needed, pay the same tax on every collective and leave fragments that block whole-node jobs."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "Schedule with topology awareness: Volcano's network-topology-aware scheduling or a binpack policy for GPUs, Kueue's topology-aware scheduling (`kueue.x-k8s.io/podset-required-topology`), Slurm `--gres-flags=enforce-binding` and `--switches`, the Kubernetes Topology Manager (`single-numa-node`). Order ranks so consecutive TP ranks share an NVLink domain, and keep `tp` no larger than a domain."
        ),
    ),
    "xid": (
        # xgettext:no-python-format
        gettext_noop("GPU reported an Xid error"),
        gettext_noop(
            # xgettext:no-python-format
            "A GPU that reported at least one Xid error with a time in the window `[as_of - window_s, as_of]` (both ends included; Xids outside it are ignored). One finding per GPU, listing every code seen. Severity is critical when any of the codes is critical in gpuobs's Xid catalog (NVIDIA's recommended action needs a GPU reset, a node reboot or service, e.g. 48, 62, 64, 74, 79, 95, 119, 120), warning otherwise (e.g. the application-level 13, 31, 43). The finding keeps firing after the Xid leaves the window while the GPU is not healthy -- its `health` not `ok` (the device plugin, DRA device taints, NVSentinel's node conditions), its node cordoned, drained or down, or an older Xid still reported -- and resolves only once it has been healthy for `healthy_s`, the period after which on-call's incident resolves too."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "Xids are the NVIDIA driver's error reports. Critical ones mean the GPU is, or soon will be, unusable: every job scheduled onto it fails until it is reset or repaired, and a gang job on it stalls all its other GPUs. Application-level Xids usually point at a bug in the job, not at the hardware, unless they repeat."
        ),
        gettext_noop(
            # xgettext:no-python-format
            "Follow the `action` of the most severe code: `reset-gpu`, `reboot-node`, `service` and `check-hardware` need the node cordoned and drained first (the `drain-node` recommendation does this), then the reset / reboot / RMA. For `restart-app`, tell the job's owner (jobs and tenants in the evidence); if the same application-level Xid repeats on one GPU with different jobs, treat it as hardware and run DCGM diagnostics (`dcgmi diag -r 3`). See docs/xid.md."
        ),
    ),
}
