// The viewer's API: one fetch helper per endpoint, and the JSON each one returns. The
// typedefs below mirror src/ggml_viz/ui/payloads/ name for name and field for field (the
// server's TypedDicts, which mypy checks, a test compares with the server's answers and another
// with these typedefs): change both together.
// Columnar records hold one list per field, all of one length. Times are nanoseconds from
// the run's first graph.

import { offlineAnswer } from "./offline.js";

// -- the run list, live updates and comparison
/**
 * @typedef {Object} RunListEntry
 * @property {string} run_id
 * @property {string} name
 * @property {?string} status "recording", "complete", "incomplete"
 * @property {?string} created
 * @property {?string} model
 * @property {?number} graphs
 *
 * @typedef {Object} RunsPayload
 * @property {RunListEntry[]} runs
 * @property {boolean} live
 *
 * @typedef {Object} LiveUpdate
 * @property {number} graphs
 * @property {string} status
 * @property {number} duration_ns
 * @property {string[]} ops
 *
 * @typedef {Object} SettingPair
 * @property {*} a
 * @property {*} b
 *
 * @typedef {Object} PhaseSpeeds tokens per second; a side without the phase has no entry
 * @property {number} [a]
 * @property {number} [b]
 *
 * @typedef {Object} OpDelta per graph
 * @property {string} phase
 * @property {string} op
 * @property {number} a_ns
 * @property {number} b_ns
 * @property {number} delta_ns
 * @property {?number} ratio null: A spent no time there
 *
 * @typedef {Object} LayerDelta per graph
 * @property {string} phase
 * @property {string} layer a layer's number, or "none"
 * @property {number} a_ns
 * @property {number} b_ns
 * @property {number} delta_ns
 * @property {?number} ratio
 *
 * @typedef {Object} TensorDelta per graph
 * @property {string} phase
 * @property {string} name
 * @property {number} a_ns
 * @property {number} b_ns
 * @property {number} delta_ns
 * @property {?number} ratio
 *
 * @typedef {Object} TimeDeltas the largest changes
 * @property {OpDelta[]} op
 * @property {LayerDelta[]} layer
 * @property {TensorDelta[]} name
 *
 * @typedef {Object} RunComparison
 * @property {string} a
 * @property {string} b
 * @property {Object<string, SettingPair>} settings_that_differ
 * @property {Object<string, PhaseSpeeds>} tokens_per_s by phase
 * @property {TimeDeltas} per_graph_time_by
 */

// -- overview
/**
 * @typedef {Object} NodeWaits
 * @property {number} seen
 * @property {number} not_seen
 * @property {number} wait_ns
 * @property {number} time_ns
 *
 * @typedef {Object} PhaseRow
 * @property {string} phase
 * @property {number} graphs
 * @property {number} tokens
 * @property {number} time_ns
 * @property {?number} tokens_per_s
 *
 * @typedef {Object} TimeRow OpTime, LayerTime, TensorTime, ComponentTime: these and their key
 * @property {number} count
 * @property {number} time_ns
 * @property {?number} mean_ns
 * @property {number} wait_ns
 * @property {number} share
 * @typedef {TimeRow & {op: string}} OpTime
 * @typedef {TimeRow & {layer: (number|string)}} LayerTime layer "none": outside layers
 * @typedef {TimeRow & {name: string}} TensorTime
 * @typedef {TimeRow & {component: string}} ComponentTime
 *
 * @typedef {Object} BufferKindRow
 * @property {string} kind
 * @property {number} buffers
 * @property {number} bytes
 * @property {string} names
 * @property {number} peak_bytes
 *
 * @typedef {Object} WeightReads
 * @property {number} weight_bytes_per_graph
 * @property {number} weight_bytes_per_decode_step
 * @property {boolean} all_experts_counted
 * @property {number} routed_decode_steps of a mixture's decode steps, those whose routing was read, when not all were
 * @property {number} weights_read
 * @property {boolean} weights_from_mmap
 * @property {?number} weight_edges_resolved_to_file
 *
 * @typedef {Object} KvUse a run with sequences: its KV cells and cache reads
 * @property {number} peak_cells the most cells all sequences held at once
 * @property {number|null} capacity
 * @property {number|null} per_sequence_capacity
 * @property {Object<string, number>} peak_cells_by_sequence
 * @property {number} context_shifts
 * @property {number} cache_reuses
 * @property {number|null} decode_kv_bytes_per_token at the largest context a decode call reached
 * @property {number|null} decode_context_cells
 *
 * @typedef {Object} KvSummary
 * @property {number} layers
 * @property {number} [used]
 * @property {number} [capacity]
 * @property {number} [fill]
 *
 * @typedef {Object} OpThroughput
 * @property {string} op
 * @property {number} time_ns
 * @property {number} flops
 * @property {number} bytes
 * @property {boolean} upper_bound the FLOPs count every cell of an attention window its mask may have skipped
 * @property {?number} gflop_per_s
 * @property {?number} gb_per_s
 * @property {?number} flops_per_byte
 * @property {?number} [floor_ns] with the run's limits measured: the least time its work could take at them
 * @property {?string} [bound] "memory" or "compute": the roof that sets the floor (null: not judged)
 * @property {?number} [of_limit] floor / time: 1 at the limit
 *
 * @typedef {Object} ComputationRow graphs of one kind
 * @property {string} label what they compute, from the weights they read ("" none)
 * @property {string} phase
 * @property {number} graphs
 * @property {number} time_ns
 *
 * @typedef {Object} Percentiles a figure over the run's requests (null: no request has it)
 * @property {?number} p50
 * @property {?number} p90
 * @property {?number} p99
 * @property {?number} max
 *
 * @typedef {Object} RequestsSummary a served run's requests in figures, as llama-server's timings count them
 * @property {number} n_requests
 * @property {number} prompt_tokens prompt tokens computed
 * @property {number} cached_tokens
 * @property {number} predicted_tokens
 * @property {?number} shared_batches the share of requests' decode calls holding other requests' tokens
 * @property {Percentiles} ttft_ms
 * @property {Percentiles} tpot_ms
 * @property {Percentiles} prompt_ms
 * @property {Percentiles} predicted_ms
 * @property {string} queue_wait why the wait for a slot is not given
 *
 * @typedef {Object} RequestText one request a run served, in one sequence
 * @property {number} seq_id
 * @property {number} start_ns from the run's first graph
 * @property {string} prompt
 * @property {number} prompt_tokens
 * @property {string} generated the tokens fed back while decoding (all but the last generated)
 * @property {number} generated_tokens
 */

// -- the roofline: the run against this machine's measured limits (`ggml-viz limits`)
/**
 * @typedef {Object} RooflineRow RooflineOp, RooflinePhase, RooflineLayer: these and their key
 * @property {number} time_ns
 * @property {number} flops
 * @property {number} bytes
 * @property {boolean} upper_bound the FLOPs count every cell of an attention window its mask may have skipped
 * @property {?number} gflop_per_s
 * @property {?number} gb_per_s
 * @property {?number} flops_per_byte
 * @property {?number} floor_ns the least time its work could take at this machine's limits
 * @property {?string} bound "memory" or "compute" (null: not judged)
 * @property {?number} of_limit floor / time: 1 at the limit
 * @typedef {RooflineRow & {op: string}} RooflineOp
 * @typedef {RooflineRow & {phase: string}} RooflinePhase
 * @typedef {RooflineRow & {layer: number}} RooflineLayer
 *
 * @typedef {Object} LimitMeasurement one limit `ggml-viz limits` measured
 * @property {string} device "CPU", "CUDA0"
 * @property {?number} threads
 * @property {string} what memory_read, matvec, matmul, page_cache_read, disk_read
 * @property {?string} type the ggml type measured (matvec, matmul)
 * @property {?number} gb_per_s
 * @property {?number} gflop_per_s
 * @property {?number} bytes
 * @property {?number} flops
 * @property {?number} seconds
 * @property {?number} repeats
 * @property {?string} note
 *
 * @typedef {Object} RooflineLimits the limits a run is judged against, and at which threads
 * @property {?string} measured
 * @property {Object} machine
 * @property {boolean} same_machine measured on the machine that recorded the run
 * @property {Object<string, ?number>} threads per phase, the threads it ran on
 * @property {number[]} judged_at the measured thread counts the nodes were judged at
 * @property {string[]} weight_types the types whose matrix-product peaks judge the nodes (F32 and the weights')
 * @property {string} device the device holding most of the node time: the one whose roofs a chart draws
 * @property {LimitMeasurement[]} measurements
 *
 * @typedef {Object} DecodeFloor the decode step's weights read at the measured bandwidth, against its median time
 * @property {number} bytes
 * @property {number} median_ns
 * @property {number} gb_per_s
 * @property {number} bandwidth_gb_per_s
 * @property {number} floor_ns
 * @property {number} of_limit
 * @property {?number} threads
 * @property {?string} weight_type
 * @property {?number} kernel_gb_per_s the matrix-vector kernel of that type at best
 *
 * @typedef {Object} PromptFloor the prompt's FLOPs at the matrix product's peak, against its time
 * @property {number} flops
 * @property {number} time_ns
 * @property {number} gflop_per_s
 * @property {number} peak_gflop_per_s
 * @property {?string} weight_type
 * @property {?string} peak_type the type whose peak it is held to
 * @property {number} of_limit
 * @property {?number} threads
 *
 * @typedef {Object} FurthestOp
 * @property {string} op
 * @property {number} of_limit
 * @property {?string} bound
 * @property {number} share of node time
 * @property {number} gflop_per_s
 * @property {number} gb_per_s
 *
 * @typedef {Object} RooflineSummary only `limits` (null) where the run holds none
 * @property {?RooflineLimits} limits
 * @property {RooflineOp[]} [by_op] the top ops by time
 * @property {RooflinePhase[]} [by_phase]
 * @property {RooflineLayer[]} [by_layer]
 * @property {?DecodeFloor} [decode_step]
 * @property {?PromptFloor} [prompt]
 * @property {?FurthestOp} [furthest]
 */

/**
 * @typedef {Object} RunSummary what `ggml-viz summary` shows
 * @property {string} run
 * @property {string} experiment_id
 * @property {string} status
 * @property {?string} incomplete_reason
 * @property {?string} created
 * @property {?Object} model the manifest's own section (name, description, architecture, layers, parameters, path)
 * @property {?Object[]} contexts
 * @property {?string} prompt
 * @property {?string} generated_text
 * @property {RequestText[]} requests the first 50 requests served, per sequence
 * @property {number} n_requests
 * @property {?RequestsSummary} request_times their counts and time percentiles (null: no request)
 * @property {string[]} backends
 * @property {number} graphs
 * @property {number} node_events
 * @property {number} timed_node_events
 * @property {number} dropped_graphs
 * @property {number} dropped_events
 * @property {number} untimed_graphs
 * @property {string} timing
 * @property {string} timing_label
 * @property {string} untimed_reason why a run whose nodes were not timed has graph times only, in words
 * @property {NodeWaits} node_waits
 * @property {PhaseRow[]} phases
 * @property {ComputationRow[]} computations graphs by what they compute (the top ones, by time)
 * @property {OpTime[]} time_by_op
 * @property {LayerTime[]} top_layers
 * @property {TensorTime[]} top_tensors
 * @property {ComponentTime[]} time_by_component
 * @property {BufferKindRow[]} memory_by_buffer
 * @property {WeightReads} weight_reads
 * @property {KvSummary} kv_cache
 * @property {KvUse|null} kv slots and the cache over time (null: no token of a sequence)
 * @property {MoeSummary} moe a mixture of experts' routing ({layers: 0} for a dense model)
 * @property {OpThroughput[]} throughput_by_op
 * @property {RooflineSummary} roofline against this machine's measured limits
 * @property {string[]} findings
 * @property {FoundSection[]} sections titled findings (plugins' summary sections), each shown apart
 * @property {Object<string, number>} clocks  timed node events by clock: host, gpu
 * @property {?GpuTimerSummary} gpu  the GPU timer's account (analysis.gpu.gpu_summary), or null
 * @property {?DeviceSummary} devices where a step's time goes per device, or null (one device)
 * @property {?PlacementAdvice} placement other flags predicted from the run, or null
 * @property {?SpeculativeSummary} speculative drafts verified and accepted, and their time, or null (none)
 *
 * @typedef {Object} PlacementCheck the recorded placement's predicted rate against its own steps'
 * @property {number} measured_tokens_per_s
 * @property {number} predicted_tokens_per_s
 * @property {number} ratio
 * @property {number} steps
 *
 * @typedef {Object} PlacementAdvice other flags predicted from the run (analysis.devices.placement_advice)
 * @property {string} recorded_flags
 * @property {Object<string, PlacementCheck>} check per phase
 * @property {?string} best_flags
 * @property {?number} best_decode_tokens_per_s
 * @property {?number} recorded_decode_tokens_per_s
 * @property {?string} finding
 *
 * @typedef {Object} GraphBars one entry per graph (a run of more graphs than the overview
 *   draws: one per slice of them, its longest graph)
 * @property {number[]} graph_id
 * @property {number[]} duration_ns
 * @property {string[]} phase
 * @property {number[]} n_tokens
 * @property {string[]} text
 * @property {number} graphs the run's graphs
 *
 * @typedef {Object} GpuStep the median traced graph of a phase on one device
 * @property {string} device "CUDA0"
 * @property {string} phase
 * @property {number} graphs traced graphs of the phase
 * @property {number} host_ns median: the graph's time on the host
 * @property {number} busy_ns median: the device busy with it (overlap once)
 * @property {number} span_ns median: its first kernel's start to its last's end
 * @property {?number} busy_share median of busy / host
 *
 * @typedef {Object} KernelTime
 * @property {string} kernel the kernel's function, or a copy's kind
 * @property {string} kind kernel | memcpy | memset
 * @property {number} count
 * @property {number} time_ns its share of the device's busy time, summed
 * @property {number} share of all the traced graphs' busy time
 * @property {number} mean_ns mean duration
 *
 * @typedef {Object} GpuOverview what the GPU timer recorded (CUDA, CUPTI's kernel records)
 * @property {string} label where GPU node times come from, in words
 * @property {string[]} devices
 * @property {string} source
 * @property {number} traced_graphs
 * @property {number} graphs graphs of the contexts traced
 * @property {GpuStep[]} steps the decode phase first
 * @property {KernelTime[]} top_kernels
 * @property {number} kernels
 * @property {number} unattributed kernels not attributed to a node
 * @property {number} copies memcpy and memset
 *
 * @typedef {Object} OverviewPayload
 * @property {string} run_id
 * @property {string} name
 * @property {RunSummary} summary
 * @property {?Object} capture the manifest's capture settings
 * @property {?Object} versions
 * @property {number} duration_ns
 * @property {string[]} ops every op of the run: bars index into it, colors follow it
 * @property {GraphBars} graph_bars
 * @property {?GpuOverview} gpu null: the run has no GPU times
 */

// -- timeline
/**
 * @typedef {Object} TimelineGraphs
 * @property {number[]} start
 * @property {number[]} end
 * @property {number[]} graph_id
 * @property {string[]} label
 * @property {string[]} phase
 *
 * @typedef {Object} NodeBars
 * @property {number[]} start
 * @property {number[]} end
 * @property {number[]} op index into TimelinePayload.ops
 * @property {number[]} event
 *
 * @typedef {Object} PixelColumns nodes narrower than a pixel, summed per pixel column
 * @property {number[]} px column of the window t0..t1, 0..width-1
 * @property {number[]} op
 * @property {number[]} fill 0..1
 *
 * @typedef {Object} KernelBars what a GPU ran, one bar each, at its GPU times
 * @property {number[]} start
 * @property {number[]} end
 * @property {number[]} busy its share of the device's busy time (overlap counted once)
 * @property {number[]} op its node's op, index into TimelinePayload.ops; -1 not attributed, -2 memcpy, -3 memset
 * @property {number[]} event its node's event (-1: none)
 * @property {number[]} kernel index into GpuLane.kernels and GpuLane.names
 * @property {number[]} bytes copies and memsets
 *
 * @typedef {Object} TracedSpans the traced graphs on a device
 * @property {number[]} start
 * @property {number[]} end
 * @property {number[]} graph_id
 *
 * @typedef {Object} GpuLane
 * @property {string} label
 * @property {number} device
 * @property {string} device_name "CUDA0"
 * @property {string[]} kernels kernel functions
 * @property {string[]} names the same kernels' whole names
 * @property {KernelBars} bars
 * @property {PixelColumns} columns op as KernelBars.op
 * @property {TracedSpans} traced
 *
 * @typedef {Object} TimelineLane
 * @property {string} label
 * @property {TimelineGraphs} graphs
 * @property {NodeBars} nodes
 * @property {PixelColumns} columns
 * @property {GpuLane[]} gpu one per device that ran the context's traced graphs
 *
 * @typedef {Object} TimelinePayload
 * @property {number} t0
 * @property {number} t1
 * @property {number} width
 * @property {string[]} ops
 * @property {TimelineLane[]} lanes one per context
 * @property {TimelineTransfers} transfers between lanes (a joined run's wire; empty otherwise)
 *
 * @typedef {Object} TimelineTransfers columnar: messages between hosts in the window, from the
 *   sender's lane to the receiver's (the largest where more than are shown: `total`)
 * @property {number[]} start sent
 * @property {number[]} end received, on the head's clock
 * @property {number[]} source lane index
 * @property {number[]} target lane index
 * @property {number[]} bytes
 * @property {string[]} command
 * @property {number} total
 */

// -- the summary's and the timeline's parts, as ui/payloads declares them
/**
 * @typedef {Object} ComponentTime
 * @property {number} count
 * @property {number} time_ns
 * @property {?number} mean_ns
 * @property {number} wait_ns
 * @property {number} share
 * @property {string} component
 *
 * @typedef {Object} DevicePhase
 * @property {string} phase
 * @property {number} steps
 * @property {number} step_ns
 * @property {DeviceTime[]} devices
 *
 * @typedef {Object} DeviceSummary Where a step's time goes per device (analysis.devices.device_summary).
 * @property {DevicePhase[]} phases
 * @property {?string} finding
 *
 * @typedef {Object} DeviceTime One device's part of a phase's mean step (analysis.devices.steps.phase_breakdown).
 * @property {string} device
 * @property {number} busy_ns
 * @property {number} idle_share
 * @property {Object<string, number>} parts
 *
 * @typedef {Object} GpuDecodeStep The median traced decode step from the GPU's side (analysis.gpu.decode_step).
 * @property {number} steps
 * @property {number} busy_ns
 * @property {number} span_ns
 * @property {number} host_ns
 * @property {string} host_of
 * @property {number} busy_share
 *
 * @typedef {Object} GpuKernelRow
 * @property {string} function
 * @property {number} count
 * @property {number} busy_ns
 * @property {number} share
 * @property {number} mean_ns
 *
 * @typedef {Object} GpuSideKernel
 * @property {string} op
 * @property {string} function
 * @property {string} main
 * @property {number} busy_ns
 * @property {number} share
 *
 * @typedef {Object} GpuTimerCost
 * @property {number} attach_ns
 * @property {number} traced_extra_ns
 * @property {number} compared
 * @property {number} graph_ns
 * @property {number} share
 *
 * @typedef {Object} GpuTimerSummary analysis.gpu.gpu_summary.
 * @property {?string} mode
 * @property {string} timer
 * @property {string} source
 * @property {?string} cupti
 * @property {?string} clock
 * @property {?string} problem
 * @property {number[]} devices
 * @property {number} graphs
 * @property {number} graphs_traced
 * @property {number} windows
 * @property {number} unattributed_graphs
 * @property {number} kernels
 * @property {number} attributed_kernels
 * @property {?string} estimate
 * @property {string[]} warnings
 * @property {?GpuDecodeStep} decode_step
 * @property {GpuKernelRow[]} top_kernels
 * @property {GpuSideKernel[]} side_kernels
 * @property {?GpuTimerCost} cost
 *
 * @typedef {Object} LaneBars
 * @property {NodeBars} nodes
 * @property {PixelColumns} columns
 *
 * @typedef {Object} LayerStats
 * @property {number} count
 * @property {number} time_ns
 * @property {number} wait_ns
 * @property {number} bytes
 * @property {number} timed
 * @property {?number} mean_ns
 * @property {number} time_share
 * @property {number} bytes_share
 * @property {?string} clock
 * @property {(number|string)} layer
 *
 * @typedef {Object} LayerTime
 * @property {number} count
 * @property {number} time_ns
 * @property {?number} mean_ns
 * @property {number} wait_ns
 * @property {number} share
 * @property {(number|string)} layer
 *
 * @typedef {Object} OpStats
 * @property {number} count
 * @property {number} time_ns
 * @property {number} wait_ns
 * @property {number} bytes
 * @property {number} timed
 * @property {?number} mean_ns
 * @property {number} time_share
 * @property {number} bytes_share
 * @property {?string} clock
 * @property {string} op
 *
 * @typedef {Object} OpTime
 * @property {number} count
 * @property {number} time_ns
 * @property {?number} mean_ns
 * @property {number} wait_ns
 * @property {number} share
 * @property {string} op
 *
 * @typedef {Object} RooflineLayer
 * @property {number} time_ns
 * @property {number} flops
 * @property {number} bytes
 * @property {boolean} upper_bound
 * @property {?number} gflop_per_s
 * @property {?number} gb_per_s
 * @property {?number} flops_per_byte
 * @property {?number} floor_ns
 * @property {?string} bound
 * @property {?number} of_limit
 * @property {number} layer
 *
 * @typedef {Object} RooflineOp
 * @property {number} time_ns
 * @property {number} flops
 * @property {number} bytes
 * @property {boolean} upper_bound
 * @property {?number} gflop_per_s
 * @property {?number} gb_per_s
 * @property {?number} flops_per_byte
 * @property {?number} floor_ns
 * @property {?string} bound
 * @property {?number} of_limit
 * @property {string} op
 *
 * @typedef {Object} RooflinePhase
 * @property {number} time_ns
 * @property {number} flops
 * @property {number} bytes
 * @property {boolean} upper_bound
 * @property {?number} gflop_per_s
 * @property {?number} gb_per_s
 * @property {?number} flops_per_byte
 * @property {?number} floor_ns
 * @property {?string} bound
 * @property {?number} of_limit
 * @property {string} phase
 *
 * @typedef {Object} TensorStats
 * @property {number} count
 * @property {number} time_ns
 * @property {number} wait_ns
 * @property {number} bytes
 * @property {number} timed
 * @property {?number} mean_ns
 * @property {number} time_share
 * @property {number} bytes_share
 * @property {?string} clock
 * @property {string} tensor
 *
 * @typedef {Object} TensorTime
 * @property {number} count
 * @property {number} time_ns
 * @property {?number} mean_ns
 * @property {number} wait_ns
 * @property {number} share
 * @property {string} name
 */

// -- nodes and events
/**
 * @typedef {Object} NodeSource
 * @property {number} slot
 * @property {string} name
 * @property {string} op
 * @property {string} type
 * @property {string} shape
 * @property {number} nbytes
 * @property {string} usage
 * @property {string} memory "disk" (the model file), "buffer", ...
 * @property {?string} buffer
 * @property {?number} file_offset
 * @property {?number} buffer_offset
 *
 * @typedef {Object} NodeValues --values stats of a node's output
 * @property {number} n
 * @property {number} nan
 * @property {number} inf
 * @property {?number} min
 * @property {?number} max
 * @property {?number} mean
 * @property {?number} std
 * @property {?number} mean_abs
 *
 * @typedef {Object} NodeGpuTime a node's time on the GPU, in a traced graph
 * @property {string} device
 * @property {number} node_index the node whose kernels computed it (itself, or its fused group's first)
 * @property {number} group_end the last node those kernels computed
 * @property {number} start_ns
 * @property {number} end_ns
 * @property {number} gpu_ns their share of the device's busy time
 * @property {number} kernels
 *
 * @typedef {Object} NodeTensor a node's tensor, as its details describe it
 * @property {string} name
 * @property {string} op
 * @property {string} op_base
 * @property {string} type
 * @property {string} shape
 * @property {number} nbytes
 * @property {?string} buffer
 * @property {?number} buffer_offset
 *
 * @typedef {Object} NodePayload
 * @property {number} event
 * @property {number} graph_id
 * @property {number} node_index
 * @property {?number} start_ns null: not timed
 * @property {?number} end_ns
 * @property {string} tokens
 * @property {string} name
 * @property {string} op
 * @property {string} op_base
 * @property {string} type
 * @property {string} shape
 * @property {number} nbytes
 * @property {?string} buffer
 * @property {?number} buffer_offset
 * @property {?number} layer
 * @property {NodeSource[]} sources
 * @property {?NodeValues} values
 * @property {?NodeGpuTime} gpu null: not on a traced GPU graph
 * @property {?NodeRouting} routing a MUL_MAT_ID's MoE layer routing in its graph; null: none
 *
 * @typedef {Object} EventRow
 * @property {number} event
 * @property {number} graph_id
 * @property {number} node_index
 * @property {?number} start_ns
 * @property {?number} duration_ns
 * @property {?number} wait_ns of the time, waiting at the barrier for other threads
 * @property {string} op
 * @property {string} name
 * @property {?number} layer
 * @property {string} type
 * @property {string} shape
 *
 * @typedef {Object} EventsPayload
 * @property {number} total
 * @property {number} offset
 * @property {EventRow[]} rows
 *
 * @typedef {Object} SearchPayload
 * @property {EventRow[]} hits
 */

// -- graphs
/**
 * @typedef {Object} GraphListEntry
 * @property {number} graph_id
 * @property {string} phase
 * @property {number} n_nodes
 * @property {number} duration_ns
 * @property {string} label
 *
 * @typedef {Object} GraphListPayload
 * @property {GraphListEntry[]} graphs
 *
 * @typedef {Object} GraphItem
 * @property {string} id "n12" a node, "L3" a collapsed layer, "t7" a leaf tensor
 * @property {string} kind "node", "layer", "weight", "kv", "input", "external"
 * @property {?number} layer
 * @property {string} name
 * @property {string} op
 * @property {number} duration_ns -1: not timed
 * @property {number} x column
 * @property {number} y row
 * @property {number} band columns of the leaves' band
 * @property {number} [node_index] nodes
 * @property {string} [type] nodes and leaves
 * @property {string} [shape]
 * @property {number} [n_nodes] layers
 * @property {number} [n_weights]
 * @property {boolean} [reads_kv]
 * @property {number} [n_inputs]
 *
 * @typedef {Object} GraphLink
 * @property {string} from
 * @property {string} to
 * @property {string} label
 * @property {number} count
 *
 * @typedef {Object} GraphLayout
 * @property {number} graph_id
 * @property {?number} layer null: every layer collapsed
 * @property {number[]} layers
 * @property {GraphItem[]} items
 * @property {GraphLink[]} links
 * @property {number} columns
 * @property {number} rows
 */

// -- memory
/**
 * @typedef {Object} DiskRegions the model file's regions, in file order
 * @property {string[]} kind "tensor", "header", "padding", ...
 * @property {string[]} name
 * @property {number[]} start
 * @property {number[]} end
 * @property {number[]} layer -1: none
 * @property {string[]} type
 * @property {string[]} category
 * @property {number[]} reads
 * @property {number[]} read_ns
 * @property {number[]} rows_read -1: not a table read by row lookups
 * @property {number[]} row_bytes_read
 *
 * @typedef {Object} RowsRead each row a lookup read, by its file bytes
 * @property {number[]} start
 * @property {number[]} end
 * @property {number[]} reads
 *
 * @typedef {Object} DiskFile
 * @property {string} path
 * @property {number} size
 * @property {DiskRegions} regions
 * @property {RowsRead} rows
 *
 * @typedef {Object} DiskTrack
 * @property {DiskFile[]} files
 *
 * @typedef {Object} BufferEntry
 * @property {number} buffer
 * @property {string} name
 * @property {string} kind "weights", "kv_cache", "compute", "output", ...
 * @property {string} usage
 * @property {number} size
 * @property {number} context_id
 *
 * @typedef {Object} KvFill
 * @property {number[]} layers
 * @property {number[]} graph_id
 * @property {number[][]} used [graph][layer]: cells in use
 * @property {number} [capacity] absent without a KV cache
 *
 * @typedef {Object} BufferTrack
 * @property {BufferEntry[]} buffers
 * @property {KvFill} kv_cache
 * @property {boolean} has_output_buffer
 *
 * @typedef {Object} MemoryPayload
 * @property {DiskTrack} disk
 * @property {BufferTrack} buffers
 *
 * @typedef {Object} OccupancyTensors
 * @property {string[]} name
 * @property {string[]} op
 * @property {number[]} start byte offset in the compute buffer
 * @property {number[]} end
 * @property {number[]} first_node
 * @property {number[]} last_node
 *
 * @typedef {Object} OccupancyPayload
 * @property {number} graph_id
 * @property {number} n_nodes
 * @property {OccupancyTensors} tensors
 * @property {number[]} live_bytes after each node
 * @property {number} peak_bytes
 */

// -- slots
/**
 * @typedef {Object} KvEvent a context shift or a prompt-cache reuse
 * @property {number} context_id
 * @property {number} decode_index
 * @property {number} time_ns the call's end
 * @property {number} seq_id
 * @property {string} kind "context_shift" or "cache_reuse"
 * @property {number} cells_before
 * @property {number} cells_after kept: the position the sequence went on from
 *
 * @typedef {Object} SlotReads per context length a decode step reached
 * @property {number[]} context_cells
 * @property {number[]} kv_bytes_per_token
 *
 * @typedef {Object} SlotsPayload a served run's KV cells per sequence (empty sequences: none)
 * @property {number|null} context_id
 * @property {number[]} time_ns per point: a call's end
 * @property {number[]} decode_index per point: that call's number
 * @property {number[]} sequences
 * @property {number[][]} cells [sequence][point]
 * @property {number|null} capacity
 * @property {number|null} per_sequence_capacity
 * @property {string} capacity_note
 * @property {KvEvent[]} events
 * @property {SlotReads} reads
 */

// -- statistics and attention
/**
 * @typedef {Object} StatsRow OpStats, LayerStats, TensorStats: these and their key
 * @property {number} count
 * @property {number} time_ns
 * @property {number} wait_ns
 * @property {number} bytes written
 * @property {number} timed
 * @property {?number} mean_ns
 * @property {number} time_share
 * @property {number} bytes_share
 * @property {?string} clock "host", "gpu", "host+gpu"; null: not timed
 * @typedef {StatsRow & {op: string}} OpStats
 * @typedef {StatsRow & {layer: (number|string)}} LayerStats
 * @typedef {StatsRow & {tensor: string}} TensorStats
 *
 * @typedef {Object} LayerActivation
 * @property {(number|string)} layer
 * @property {?number} min
 * @property {?number} max
 * @property {?number} mean_abs
 * @property {number} nan
 * @property {number} inf
 * @property {number} nodes
 *
 * @typedef {Object} FoundSection a titled finding's sentences: a plugin's summary section
 * @property {string} title
 * @property {string[]} lines
 * @property {string} source "built-in", or the plugin's package and version
 *
 * @typedef {Object} TimeSource one clock the node times come from
 * @property {string} clock "host" or "gpu"
 * @property {string} label in words
 * @property {number} timed node events
 * @property {number} time_ns
 *
 * @typedef {Object} StatsPayload
 * @property {number} total_time_ns
 * @property {TimeSource[]} time_sources
 * @property {OpStats[]} by_op
 * @property {LayerStats[]} by_layer
 * @property {TensorStats[]} by_tensor the top 500
 * @property {string[]} findings
 * @property {FoundSection[]} sections titled findings (plugins' summary sections), each shown apart
 * @property {LayerActivation[]} activation_by_layer empty without --values stats
 *
 * @typedef {Object} RequestRouting a server's request: its own layer × expert load
 * @property {string} label
 * @property {number} seq_id
 * @property {number[][]} tokens [layer][expert]
 *
 * @typedef {Object} ExpertsPayload a mixture of experts' routing (empty layers: none recorded)
 * @property {number[]} layers
 * @property {number} n_expert
 * @property {number} experts_per_token
 * @property {number[][]} tokens [layer][expert]: (token, slot) rows routed to it
 * @property {number[][]} bytes [layer][expert]: bytes of its weights read
 * @property {number[][]} time_share [layer][expert]: estimated share of the layer's MUL_MAT_ID time
 * @property {string[]} devices per layer: the device its experts live on
 * @property {RequestRouting[]} requests a server's requests (none for one)
 *
 * @typedef {Object} RequestBar one request on the run's time axis (ns from its first graph), with its figures
 * @property {number} request
 * @property {number} seq_id
 * @property {number} first_graph_id
 * @property {number} last_graph_id
 * @property {number} start_ns its first decode call's start: the prompt's bar begins
 * @property {number} prompt_end_ns the prompt's bar ends, the decode's begins
 * @property {number} end_ns the decode's bar ends
 * @property {number} prompt_n
 * @property {number} cache_n
 * @property {number} predicted_n
 * @property {number} prompt_ms
 * @property {number} ttft_ms
 * @property {number} predicted_ms
 * @property {?number} tpot_ms
 * @property {number} batches
 * @property {number} shared_batches
 * @property {number} share_ms
 * @property {string} prompt how its prompt (the tokens it computed) begins
 *
 * @typedef {Object} RequestsPayload a server's requests (none: the run served none)
 * @property {RequestBar[]} requests
 * @property {?RequestsSummary} summary
 *
 * @typedef {Object} WhatifMemory one device's memory under a placement, in bytes
 * @property {number} weights
 * @property {number} kv_cache
 * @property {number} compute
 * @property {number} total
 *
 * @typedef {Object} WhatifRow one placement predicted from the run
 * @property {string} flags as llama.cpp spells them (a flag left out: as recorded)
 * @property {boolean} recorded
 * @property {?number} decode_tokens_per_s
 * @property {?number} prompt_tokens_per_s
 * @property {Object<string, number>} decode_parts ns of a decode step: each device's compute, "crossings", "fixed"
 * @property {Object<string, WhatifMemory>} memory per device
 *
 * @typedef {Object} WhatifPayload other flags predicted from the run (no rows: `reason` says why)
 * @property {?string} reason
 * @property {string[]} devices
 * @property {WhatifRow[]} rows the recorded placement first, then the fastest decode found
 * @property {Object<string, PlacementCheck>} check per phase
 * @property {?number} prompt_tokens
 * @property {string[]} limit_doubts the run's limits slower at more threads (other work had the cores?)
 * @property {string} left_out
 *
 * @typedef {Object} TokenRouting columnar: each token the layer computed
 * @property {number[]} position
 * @property {string[]} text
 * @property {number[][]} experts the router's choices, best first
 * @property {Array<Array<?number>>} weights
 *
 * @typedef {Object} NodeRouting a MUL_MAT_ID's layer routing in its graph
 * @property {?number} layer
 * @property {number} n_expert
 * @property {TokenRouting} tokens
 *
 * @typedef {Object} MoeLayerBalance one MoE layer's load over its experts
 * @property {number} layer
 * @property {number} n_expert
 * @property {number} tokens
 * @property {number} max_over_mean
 * @property {number} never_used
 * @property {number} entropy_bits
 * @property {number} entropy_share
 * @property {number[][]} hottest [expert, share of the load], busiest first
 * @property {number} prompt_tokens
 * @property {number} decode_tokens
 *
 * @typedef {Object} MoeSummary (only layers, 0, for a dense model)
 * @property {number} layers
 * @property {number} [graphs_routed]
 * @property {number} [graphs_with_experts]
 * @property {number} [n_expert]
 * @property {number} [experts_per_token]
 * @property {MoeLayerBalance[]} [balance]
 * @property {number} [never_used]
 * @property {number} [worst_layer]
 * @property {number} [worst_max_over_mean]
 * @property {number} [median_max_over_mean]
 * @property {number} [median_entropy_share]
 * @property {Object<string, number>} [decode_expert_bytes_by_device]
 * @property {Object<string, number>} [token_share_by_device]
 *
 * @typedef {Object} SpeculativeRequest one request's speculative decoding (analysis.speculative)
 * @property {number} seq_id
 * @property {number} start_ns from the run's first graph
 * @property {number} verifications
 * @property {number} drafted
 * @property {number} accepted
 * @property {number} accepted_assumed of accepted: the last verification's drafts, which no later batch confirms
 * @property {number} draft_ns the draft context's time for the request
 * @property {number} draft_reread_ns of draft_ns: re-reading the target's batches
 * @property {number} verify_ns the request's share of the verification batches
 * @property {number} rejected_ns of verify_ns: the rejected drafts' share
 *
 * @typedef {Object} SpeculativeSummary a run's speculative decoding (analysis.speculative)
 * @property {string} method "draft model" or "draftless"
 * @property {number[]} target_contexts
 * @property {number[]} draft_contexts
 * @property {number} draft_graphs
 * @property {number} verifications
 * @property {number} drafted
 * @property {number} accepted
 * @property {number} accepted_assumed
 * @property {?number} acceptance
 * @property {number} draft_ns
 * @property {number} draft_reread_ns
 * @property {number} verify_ns
 * @property {number} rejected_ns
 * @property {number} tokens_fed the sampled token and accepted drafts of each verification
 * @property {number} plain_steps
 * @property {?number} plain_step_ns the median single-token decode step of the target, or null (none)
 * @property {?number} plain_estimate_ns tokens_fed at that step's time, or null
 * @property {SpeculativeRequest[]} requests
 *
 * @typedef {Object} AttentionIndexPayload
 * @property {Object<string, number[]>} graphs graph id -> layers with captured attention
 * @property {number} heads
 * @property {boolean} flash_attention
 *
 * @typedef {Object} AttentionPayload
 * @property {number} graph_id
 * @property {number} layer
 * @property {number} head
 * @property {number} heads
 * @property {string[]} query_labels
 * @property {number[]} query_positions
 * @property {string[]} key_labels
 * @property {number[][]} weights [query][key]
 */

let token = "";
let embedded = null;

// Where the answers come from: the server (with the page's access token), or a report's
// embedded answers ({answers}).
export function configure(options) {
  token = options.token ?? "";
  embedded = options.embedded ?? null;
}
export const isOffline = () => embedded !== null;

// A query as a URL's search part: empty values left out.
export function queryString(query) {
  const qs = new URLSearchParams();
  for (const [key, value] of Object.entries(query))
    if (value !== undefined && value !== null && value !== "") qs.set(key, value);
  return qs.toString() ? "?" + qs : "";
}

// Any endpoint by its path under /api/ (the tests call it too).
export async function api(path, query = {}) {
  if (embedded) return offlineAnswer(embedded.answers, path, query);
  const response = await fetch(`/api/${path}${queryString(query)}`, { headers: { "X-GGML-Viz-Token": token } });
  if (!response.ok) throw new Error(`${response.status}: ${await response.text()}`);
  return response.json();
}

/** @returns {Promise<RunsPayload>} */
export const getRuns = () => api("runs");
/** @returns {Promise<RunComparison>} */
export const getComparison = (a, b) => api("compare", { a, b });
/** @returns {Promise<OverviewPayload>} */
export const getOverview = (runId) => api(`runs/${runId}/overview`);
/** @returns {Promise<TimelinePayload>} */
export const getTimeline = (runId, t0, t1, width) => api(`runs/${runId}/timeline`, { t0, t1, width });
/** @returns {Promise<NodePayload>} */
export const getNode = (runId, graphId, nodeIndex) => api(`runs/${runId}/node`, { graph: graphId, index: nodeIndex });
/** @returns {Promise<EventRow>} */
export const getEvent = (runId, event) => api(`runs/${runId}/event/${event}`);
/** @returns {Promise<SearchPayload>} */
export const getSearch = (runId, text) => api(`runs/${runId}/search`, { q: text });
/** @returns {Promise<EventsPayload>} query: op, name, layer, t0, t1, file_lo, file_hi, offset, limit */
export const getEvents = (runId, query) => api(`runs/${runId}/events`, query);
/** @returns {Promise<GraphListPayload>} */
export const getGraphList = (runId) => api(`runs/${runId}/graphs`);
/** @returns {Promise<GraphLayout>} layer null: every layer collapsed */
export const getGraph = (runId, graphId, layer) => api(`runs/${runId}/graph/${graphId}`, { layer: layer ?? "" });
/** @returns {Promise<MemoryPayload>} */
export const getMemory = (runId) => api(`runs/${runId}/memory`);
/** @returns {Promise<OccupancyPayload>} */
export const getOccupancy = (runId, graphId) => api(`runs/${runId}/occupancy/${graphId}`);
/** @returns {Promise<StatsPayload>} */
export const getStats = (runId) => api(`runs/${runId}/stats`);
/** @returns {Promise<ExpertsPayload>} */
export const getExperts = (runId) => api(`runs/${runId}/experts`);
/** @returns {Promise<RequestsPayload>} */
export const getRequests = (runId) => api(`runs/${runId}/requests`);
/** @returns {Promise<SlotsPayload>} */
export const getSlots = (runId) => api(`runs/${runId}/slots`);
/** @returns {Promise<WhatifPayload>} */
export const getWhatif = (runId) => api(`runs/${runId}/whatif`);
/** @returns {Promise<AttentionIndexPayload>} */
export const getAttentionIndex = (runId) => api(`runs/${runId}/attention-index`);
/** @returns {Promise<AttentionPayload>} */
export const getAttention = (runId, graph, layer, head) => api(`runs/${runId}/attention`, { graph, layer, head });
// The live stream's URL (server-sent events of LiveUpdate; EventSource sends no headers, so the token rides along).
export const liveUrl = (runId) => `/api/runs/${runId}/live?token=${encodeURIComponent(token)}`;
