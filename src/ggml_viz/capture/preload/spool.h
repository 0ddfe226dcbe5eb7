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
 *   SPOOL_GPU      binary, a closed GPU trace window (gpu/gpu_tracer.h; gpu_serialize writes it):
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
 * ggml_viz/capture/preload/spool.py reads it; the layouts are checked against _recorder's sizes.
 */
#ifndef GGML_VIZ_SPOOL_H
#define GGML_VIZ_SPOOL_H

#include <stdint.h>

#include "../core/recorder.h"

#define SPOOL_MAGIC "GGVZSPL3"

enum { SPOOL_START = 1, SPOOL_CONTEXT = 2, SPOOL_TAKE = 3, SPOOL_FAILED = 4, SPOOL_END = 5, SPOOL_GPU = 6,
       SPOOL_WEIGHTS = 7, SPOOL_UNTRACED = 8, SPOOL_CONNECTION = 9, SPOOL_WIRE = 10 };

typedef struct {
    uint32_t kind;
    uint32_t context_id;
    uint64_t size; /* payload bytes */
} SpoolFrameHeader;

typedef struct {
    uint32_t plain_repeat, same;
    uint64_t n_nodes;
    int64_t start_ns, end_ns, boundary_ns, n_timed;
    uint64_t part_sizes[GRAPH_PARTS];
} SpoolGraphHeader;

/* One RPC message, as it passed this process (preload_wire.c). */
typedef struct {
    int64_t start_ns, end_ns; /* its first byte left (was sent) / arrived, its last byte passed */
    uint64_t sequence;        /* the request's number on its connection (a response: its request's) */
    uint64_t bytes;           /* on the wire, framing included */
    uint64_t data_bytes;      /* tensor bytes it carries (SET_TENSOR, GET_TENSOR's response) */
    uint64_t tensor_id;       /* the tensor it names: the head's address of it (0: none) */
    uint32_t connection;      /* SPOOL_CONNECTION's number */
    uint8_t command, is_response, sent, unused;
    char name[64];            /* the tensor's name */
} WireRecord;

#endif
