/*
 * The spool: how the preload library hands a native program's records to ggml-viz.
 *
 * One append-only file per traced process, `RUN/spool/PID.spool`. It starts with the 8
 * bytes SPOOL_MAGIC; then frames, each written with one write() so that a process that
 * dies leaves whole frames behind it and at most one cut short at the end:
 *
 *   SpoolFrameHeader (16 bytes) | payload (size bytes) | CRC-32 of the payload (uint32, zlib's)
 *
 * Frames (all numbers little-endian):
 *   SPOOL_START    JSON: the process (pid, argv), the libraries it loaded, ggml's version, settings
 *   SPOOL_CONTEXT  JSON: a context (llama's, or a ggml scheduler's) and its model
 *   SPOOL_TAKE     binary, what one take of a context's recorder gave (see below)
 *   SPOOL_FAILED   text: why recording stopped (inference went on untraced)
 *   SPOOL_END      JSON: the process is exiting; counts; the GPU timer's state
 *   SPOOL_GPU      binary, a closed GPU trace window (gpu/gpu_timer.h; gpu_serialize writes it):
 *                  uint64 n_computes, n_node_calls, n_api_calls, n_activities, n_names, name_bytes
 *                  int64 clock_offset_ns, clock_uncertainty_ns
 *                  uint64 first_name_id, dropped, invalid, overhead_ns, reason
 *                  GpuComputeRecord[], GpuNodeCall[], GpuApiRecord[], GpuActivityRecord[],
 *                  uint32 name_length[n_names], then the names' bytes
 *   SPOOL_WEIGHTS  binary, WeightPrint[]: weights the program left unnamed, first read by the
 *                  graphs of the SPOOL_TAKE that follows (recorder.h: weight_fingerprint)
 *   SPOOL_UNTRACED JSON: the process ran untraced (pid, argv, ggml_library, ggml_version, reason);
 *                  the only frame of its spool, written where it said so on stderr
 *   SPOOL_CONNECTION JSON: a connection of ggml's RPC protocol (preload_wire.c): its number, this
 *                  process's role on it (head, worker), its local and peer addresses, when it opened
 *   SPOOL_WIRE     binary, WireRecord[]: the RPC messages that passed, whole, in order
 *
 * SPOOL_TAKE payload:
 *   uint64 n_calls, n_tokens, n_graphs, text_bytes
 *   DecodeRecord[n_calls]
 *   int32 token_id[n_tokens], int32 pos[n_tokens], int32 seq_id[n_tokens], uint8 output[n_tokens]
 *   uint32 text_length[n_tokens], then text_bytes bytes: each token's text piece, in order
 *   per graph: SpoolGraphHeader, then its GRAPH_PARTS parts' bytes, in recorder.h's order
 *
 * ggml_viz/capture/preload/spool.py reads it. The frame kinds, the magic and every record named here
 * are the contract's (ggml_viz_contract.h, written from ggml_viz/capture/contract/ at build time).
 */
#ifndef GGML_VIZ_SPOOL_H
#define GGML_VIZ_SPOOL_H

#include <stdint.h>

#include "../core/recorder.h"

#endif
