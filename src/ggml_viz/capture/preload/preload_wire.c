/*
 * The preload library, part 4: ggml's RPC protocol on the wire (llama.cpp's distributed
 * inference: `rpc-server` on each worker, `--rpc host:port` on the head).
 *
 * The head talks to each worker over one TCP connection per endpoint; a worker serves one
 * connection at a time. Every message is framed alike (ggml-rpc.cpp, protocol 7):
 *     request  (head → worker): | command (1 byte) | size (8 bytes) | payload (size bytes) |
 *     response (worker → head): | size (8 bytes) | payload (size bytes) |
 * and the first request of a connection is HELLO. This part interposes the C library's socket
 * calls (connect, accept, send, recv), follows the bytes of the connections whose first request
 * is HELLO (on the head: connections it opened; on a worker: connections it accepted), and
 * records each message whole: when its first and last bytes passed this process, its size on
 * the wire, and, for the tensor messages (SET_TENSOR, GET_TENSOR, COPY_TENSOR, SET_TENSOR_HASH),
 * the tensor it names (the head's tensor address and name, as the protocol carries them) and the
 * tensor bytes it carries. Both ends record the same messages in the same order: a run of the
 * head and runs of its workers are joined on them (message sequence numbers on a connection, the
 * connection's two addresses), and their clock offsets bounded by them (a message is received
 * after it was sent).
 *
 * Nothing here reads a connection that is not ggml's RPC: any other connection leaves the
 * table at its first message. Transports that bypass the socket (RDMA) are not seen.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "preload.h"

/* Protocol 7's layout (ggml-rpc.cpp): the serialized tensor (its commands, RPC_*, are the contract's). */
enum {
    RPC_KNOWN_MAJOR = 7,
    RPC_TENSOR_SIZE = 296,     /* sizeof(rpc_tensor): id 8, ..., name 64 at 228, use_count 4 */
    RPC_TENSOR_NAME_AT = 228,
    RPC_HELLO_MAX = 4096,      /* HELLO's payload is small (rpc_msg_hello_req: 24 bytes in protocol 7) */
    MAX_WIRE_FDS = 4096,       /* fds past this are not followed */
    MAX_CONNECTIONS = 256,
    PAYLOAD_PEEK = RPC_TENSOR_SIZE + 16, /* what is kept of a payload: a tensor, offset, size */
};

/* One direction of a connection, parsed as its bytes pass. */
typedef struct {
    int stage;                  /* 0 the command byte (requests only), 1 the size, 2 the payload */
    uint8_t size_bytes[8];
    int size_have;
    uint64_t size, got;
    uint8_t peek[PAYLOAD_PEEK]; /* the payload's first bytes */
    WireRecord record;          /* the message in flight */
} Direction;

typedef struct {
    pthread_mutex_t lock;  /* first: what follows it is reset for each new connection on the fd */
    int live;
    uint32_t connection;   /* index into the connections this process described */
    int is_head;           /* this process opened it (sends requests) */
    int confirmed;         /* its first request was HELLO */
    int major;             /* the protocol's major version, from HELLO's response (-1 unknown) */
    uint64_t requests;     /* requests parsed so far: the sequence number of the next */
    uint8_t last_command;  /* the request a response answers */
    uint64_t last_sequence;
    char last_name[64];
    uint64_t last_tensor;
    Direction requests_dir, responses_dir;
} Connection;

static Connection *by_fd[MAX_WIRE_FDS];
static pthread_mutex_t wire_lock = PTHREAD_MUTEX_INITIALIZER; /* the records and the connection count */
static Array wire_records; /* WireRecord, waiting to be written */
static int wire_records_ready;
static uint32_t n_connections;

static void address_text(const struct sockaddr_storage *address, char *out, size_t size) {
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (address->ss_family == AF_INET) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)address;
        inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
        port = ntohs(v4->sin_port);
    } else if (address->ss_family == AF_INET6) {
        const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)address;
        inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
        port = ntohs(v6->sin6_port);
    }
    snprintf(out, size, address->ss_family == AF_INET6 ? "[%s]:%d" : "%s:%d", host, port);
}

/* A TCP connection this process opened (head) or accepted (worker): followed from now on,
   until its first request shows it is not ggml's RPC. */
static void follow(int fd, int is_head) {
    if (fd < 0 || fd >= MAX_WIRE_FDS || !preload_recording()) return;
    struct sockaddr_storage local, peer;
    socklen_t local_size = sizeof local, peer_size = sizeof peer;
    int type = 0;
    socklen_t type_size = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &type_size) != 0 || type != SOCK_STREAM ||
        getsockname(fd, (struct sockaddr *)&local, &local_size) != 0 ||
        getpeername(fd, (struct sockaddr *)&peer, &peer_size) != 0 ||
        (local.ss_family != AF_INET && local.ss_family != AF_INET6)) {
        return;
    }
    Connection *c = by_fd[fd];
    if (!c) {
        c = calloc(1, sizeof *c);
        if (!c) return;
        pthread_mutex_init(&c->lock, NULL);
    }
    pthread_mutex_lock(&c->lock);
    memset((char *)c + offsetof(Connection, live), 0, sizeof *c - offsetof(Connection, live));
    c->is_head = is_head;
    c->major = -1;
    c->responses_dir.stage = 1; /* a response has no command byte */
    c->live = 1;
    pthread_mutex_lock(&wire_lock);
    c->connection = n_connections < MAX_CONNECTIONS ? n_connections++ : MAX_CONNECTIONS;
    pthread_mutex_unlock(&wire_lock);
    if (c->connection >= MAX_CONNECTIONS) c->live = 0;
    char local_text[80], peer_text[80];
    address_text(&local, local_text, sizeof local_text);
    address_text(&peer, peer_text, sizeof peer_text);
    pthread_mutex_unlock(&c->lock);
    by_fd[fd] = c;
    if (!c->live) return;
    char json[400];
    int n = snprintf(json, sizeof json,
                     "{\"connection\":%u,\"role\":\"%s\",\"local\":\"%s\",\"peer\":\"%s\",\"opened_ns\":%lld}",
                     c->connection, is_head ? "head" : "worker", local_text, peer_text, (long long)now_ns());
    spool_frame(SPOOL_CONNECTION, 0, json, (size_t)n);
}

static void keep_record(const WireRecord *record) {
    pthread_mutex_lock(&wire_lock);
    if (!wire_records.item_size) array_init(&wire_records, sizeof(WireRecord));
    WireRecord *slot = array_push(&wire_records);
    if (slot) *slot = *record;
    wire_records_ready = 1;
    pthread_mutex_unlock(&wire_lock);
}

/* The tensor a message's payload names, and the tensor bytes it carries. */
static void describe_tensor(Connection *c, Direction *d, WireRecord *r) {
    if (c->major != RPC_KNOWN_MAJOR) return;
    uint64_t have = d->size < PAYLOAD_PEEK ? d->size : PAYLOAD_PEEK;
    if (r->is_response) {
        /* GET_TENSOR's answer is the tensor's bytes; the request named the tensor */
        if (r->command == RPC_GET_TENSOR) {
            r->data_bytes = d->size;
            r->tensor_id = c->last_tensor;
            memcpy(r->name, c->last_name, sizeof r->name);
        }
        return;
    }
    int names = r->command == RPC_SET_TENSOR || r->command == RPC_GET_TENSOR || r->command == RPC_COPY_TENSOR ||
                r->command == RPC_SET_TENSOR_HASH;
    if (!names || have < RPC_TENSOR_SIZE) return;
    memcpy(&r->tensor_id, d->peek, sizeof r->tensor_id);
    memcpy(r->name, d->peek + RPC_TENSOR_NAME_AT, sizeof r->name);
    r->name[sizeof r->name - 1] = 0;
    /* SET_TENSOR: | rpc_tensor | cache flag (1 byte) | offset (8 bytes) | data | */
    if (r->command == RPC_SET_TENSOR && d->size >= RPC_TENSOR_SIZE + 9) r->data_bytes = d->size - RPC_TENSOR_SIZE - 9;
}

/* Bytes of one direction, as they passed: whole messages are recorded. `before`: the time the
   call began (a send's first byte leaves after it), `after`: when it returned (a received
   byte arrived before it). */
static void parse(Connection *c, Direction *d, int is_response, int sent, const uint8_t *bytes, size_t n,
                  int64_t before, int64_t after) {
    while (n > 0 && c->live) {
        if (is_response ? d->stage == 1 && d->size_have == 0 : d->stage == 0) { /* a message begins */
            memset(&d->record, 0, sizeof d->record);
            d->record.start_ns = sent ? before : after;
            d->record.connection = c->connection;
            d->record.is_response = (uint8_t)is_response;
            d->record.sent = (uint8_t)sent;
        }
        if (d->stage == 0) {
            uint8_t command = *bytes++;
            n--;
            if (command >= RPC_COMMANDS || (!c->confirmed && command != RPC_HELLO)) {
                c->live = 0; /* not ggml's RPC */
                return;
            }
            d->record.command = command;
            d->stage = 1;
            d->size_have = 0;
            continue;
        }
        if (d->stage == 1) {
            size_t take = 8 - (size_t)d->size_have < n ? 8 - (size_t)d->size_have : n;
            memcpy(d->size_bytes + d->size_have, bytes, take);
            d->size_have += (int)take;
            bytes += take;
            n -= take;
            if (d->size_have < 8) continue;
            memcpy(&d->size, d->size_bytes, 8);
            d->got = 0;
            d->stage = 2;
            if (!is_response) {
                if (!c->confirmed && d->size > RPC_HELLO_MAX) {
                    c->live = 0;
                    return;
                }
                c->confirmed = 1;
                d->record.sequence = c->requests++;
            } else {
                d->record.command = c->last_command;
                d->record.sequence = c->last_sequence;
            }
        }
        if (d->stage == 2 && d->got < d->size) {
            size_t take = d->size - d->got < n ? (size_t)(d->size - d->got) : n;
            if (d->got < PAYLOAD_PEEK) {
                size_t keep = PAYLOAD_PEEK - d->got < take ? (size_t)(PAYLOAD_PEEK - d->got) : take;
                memcpy(d->peek + d->got, bytes, keep);
            }
            d->got += take;
            bytes += take;
            n -= take;
        }
        if (d->stage == 2 && d->got == d->size) { /* whole */
            WireRecord *r = &d->record;
            r->end_ns = after;
            r->bytes = (is_response ? 8 : 9) + d->size;
            if (is_response && r->command == RPC_HELLO && d->size >= 1) c->major = d->peek[0];
            describe_tensor(c, d, r);
            if (!is_response) {
                c->last_command = r->command;
                c->last_sequence = r->sequence;
                c->last_tensor = r->tensor_id;
                memcpy(c->last_name, r->name, sizeof c->last_name);
            }
            keep_record(r);
            d->stage = is_response ? 1 : 0;
            d->size_have = 0;
        }
    }
}

/* Bytes that passed a followed connection: requests go from the head to the worker. */
static void passed(int fd, const void *bytes, ssize_t n, int sent, int64_t before) {
    if (n <= 0 || fd < 0 || fd >= MAX_WIRE_FDS) return;
    Connection *c = by_fd[fd];
    if (!c || !c->live) return;
    int64_t after = now_ns();
    pthread_mutex_lock(&c->lock);
    int is_request = sent == c->is_head;
    parse(c, is_request ? &c->requests_dir : &c->responses_dir, !is_request, sent, bytes, (size_t)n, before, after);
    pthread_mutex_unlock(&c->lock);
}

bool wire_written(void) {
    return !wire_records_ready;
}

/* Write the messages recorded so far (the idle writer, and at exit). */
void write_wire(void) {
    if (!wire_records_ready) return;
    pthread_mutex_lock(&wire_lock);
    Array taken = wire_records;
    array_init(&wire_records, sizeof(WireRecord));
    wire_records_ready = 0;
    pthread_mutex_unlock(&wire_lock);
    if (taken.count) spool_frame(SPOOL_WIRE, 0, taken.items, taken.count * sizeof(WireRecord));
    array_free(&taken);
}

/* ---- interposed: the C library's socket calls ---------------------------------------------- */

typedef int (*connect_fn)(int, const struct sockaddr *, socklen_t);
typedef int (*accept_fn)(int, struct sockaddr *, socklen_t *);
typedef int (*accept4_fn)(int, struct sockaddr *, socklen_t *, int);
typedef ssize_t (*send_fn)(int, const void *, size_t, int);
typedef ssize_t (*recv_fn)(int, void *, size_t, int);

EXPORT int connect(int fd, const struct sockaddr *address, socklen_t size) {
    ORIGINAL_ONCE(connect, connect_fn);
    if (!original_connect) {
        errno = ENOSYS;
        return -1;
    }
    int result = original_connect(fd, address, size);
    if (result == 0) follow(fd, 1);
    return result;
}

EXPORT int accept(int fd, struct sockaddr *address, socklen_t *size) {
    ORIGINAL_ONCE(accept, accept_fn);
    if (!original_accept) {
        errno = ENOSYS;
        return -1;
    }
    int result = original_accept(fd, address, size);
    if (result >= 0) follow(result, 0);
    return result;
}

EXPORT int accept4(int fd, struct sockaddr *address, socklen_t *size, int flags) {
    ORIGINAL_ONCE(accept4, accept4_fn);
    if (!original_accept4) {
        errno = ENOSYS;
        return -1;
    }
    int result = original_accept4(fd, address, size, flags);
    if (result >= 0) follow(result, 0);
    return result;
}

EXPORT ssize_t send(int fd, const void *bytes, size_t n, int flags) {
    ORIGINAL_ONCE(send, send_fn);
    if (!original_send) {
        errno = ENOSYS;
        return -1;
    }
    int followed = fd >= 0 && fd < MAX_WIRE_FDS && by_fd[fd] && by_fd[fd]->live;
    int64_t before = followed ? now_ns() : 0;
    ssize_t result = original_send(fd, bytes, n, flags);
    if (followed) {
        int saved = errno;
        passed(fd, bytes, result, 1, before);
        errno = saved;
    }
    return result;
}

EXPORT ssize_t recv(int fd, void *bytes, size_t n, int flags) {
    ORIGINAL_ONCE(recv, recv_fn);
    if (!original_recv) {
        errno = ENOSYS;
        return -1;
    }
    ssize_t result = original_recv(fd, bytes, n, flags);
    if (fd >= 0 && fd < MAX_WIRE_FDS && by_fd[fd] && by_fd[fd]->live && !(flags & MSG_PEEK)) {
        int saved = errno;
        passed(fd, bytes, result, 0, 0);
        errno = saved;
    }
    return result;
}
