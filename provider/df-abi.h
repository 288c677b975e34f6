/* The host interface's layout shared with the daemon (docs/host-interface.md, version 6).
 *
 * Everything here is what both sides of a ring agree on byte by byte; proto/hostif.py and
 * proto/workq.py are the daemon's reading of the same page. Little-endian, naturally aligned; an index or word is one
 * aligned 4-byte access, made _Atomic so that no compiler splits or merges it. */
#ifndef DF_ABI_H
#define DF_ABI_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define DF_HOSTIF_VERSION 6u
#define DF_PROTOCOL_VERSION 7u /* the HELLO version range this driver speaks (min = max) */
#define DF_RING_MAGIC 0x31514644u /* the bytes "DFQ1" */
#define DF_LINE 64u

enum df_ring_kind { DF_RING_SQ = 1, DF_RING_RQ = 2, DF_RING_EQ = 3, DF_RING_SRQ = 4 };

/* The first 192 bytes of every ring: descriptor, producer line, consumer line. */
struct df_ring_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t kind;
	uint32_t entry_size;
	uint32_t entries;
	uint8_t rsvd0[DF_LINE - 16];
	alignas(DF_LINE) _Atomic uint32_t prod; /* written by the producer only */
	_Atomic uint32_t prod_words[15];
	alignas(DF_LINE) _Atomic uint32_t cons; /* written by the consumer only */
	_Atomic uint32_t cons_words[15];
};
_Static_assert(sizeof(struct df_ring_hdr) == 3 * DF_LINE, "ring header is three lines");
_Static_assert(offsetof(struct df_ring_hdr, prod) == 64, "prod at 64");
_Static_assert(offsetof(struct df_ring_hdr, cons) == 128, "cons at 128");

/* The daemon's words on a work queue's consumer line (cons_words[i] is at 132 + 4 i); an
 * SRQ's ring has DONE, STATE (its DAT_SRQ_STATE) and HEARD. */
enum df_wq_word { DF_WQ_DONE = 0, DF_WQ_STATE = 1, DF_WQ_HEARD = 2, DF_WQ_POLL = 3, DF_WQ_BOUND = 4 };
/* An event queue's words: the daemon's on the producer line, the driver's on the consumer's. */
enum df_eq_prod_word { DF_EQ_OVERFLOW = 0, DF_EQ_NOTIFIED = 1 };
enum df_eq_cons_word { DF_EQ_ARM = 0, DF_EQ_WANT = 1 };

/* Work queues: one segment per EP, "/datfabric-<ia>-wq<ep>", SQ at 0, RQ at DF_RQ_OFFSET, and
 * the staging area at DF_STAGE_OFFSET (page-aligned): where an unfenced Send's or RDMA Write's
 * (with immediate data or not) bytes are copied at post, so the daemon sends them without
 * reading this process. */
#define DF_WQ_ENTRIES 4096u
#define DF_WQ_ENTRY_SIZE 448u
#define DF_RQ_OFFSET (sizeof(struct df_ring_hdr) + DF_WQ_ENTRIES * DF_WQ_ENTRY_SIZE)
#define DF_STAGE_OFFSET ((2 * DF_RQ_OFFSET + 4095u) / 4096u * 4096u)
#define DF_STAGE_BYTES 0x400000u /* 4 MiB, a power of two: free-running u32 offsets wrap with it */
#define DF_WQ_SEGMENT_SIZE (DF_STAGE_OFFSET + DF_STAGE_BYTES)
#define DF_WQE_MAX_SEGMENTS 16u
/* Shared receive queues: one segment per SRQ, "/datfabric-<ia>-srq<srq>", one ring of RECEIVE
 * WQEs at 0, laid out as an RQ (kind DF_RING_SRQ), sized for the provider's maximum. */
#define DF_SRQ_SEGMENT_SIZE DF_RQ_OFFSET
#define DF_WQE_STAGED 0x01u /* wqe_flags: the bytes are in the staging area at stage_offset */
_Static_assert(DF_STAGE_OFFSET % 4096u == 0 && DF_STAGE_OFFSET >= 2 * DF_RQ_OFFSET &&
		       DF_STAGE_OFFSET - 2 * DF_RQ_OFFSET < 4096u,
	       "the staging area starts at the first page boundary after the RQ");

/* 5-7 are the IB extensions (dat_ib_extensions.h): an atomic carries one local segment of 8
 * bytes, where the remote's original value lands, and remote_length 8; it is never STAGED. */
enum df_opcode {
	DF_OP_SEND = 1,
	DF_OP_RDMA_WRITE = 2,
	DF_OP_RDMA_READ = 3,
	DF_OP_RECEIVE = 4,
	DF_OP_FETCH_ADD = 5, /* operand: the value added */
	DF_OP_CMP_SWAP = 6, /* compare: the value compared; operand: the value swapped in */
	DF_OP_RDMA_WRITE_IMM = 7, /* an RDMA Write; operand: the 32-bit immediate data */
};

struct df_wqe_segment {
	uint64_t virtual_address;
	uint64_t segment_length;
	uint32_t lmr_context;
	uint32_t rsvd;
};
_Static_assert(sizeof(struct df_wqe_segment) == 24, "a WQE segment is 24 bytes");

struct df_wqe {
	uint8_t opcode;
	uint8_t wqe_flags; /* DF_WQE_STAGED or 0 */
	uint16_t num_segments;
	uint32_t completion_flags;
	uint64_t user_cookie;
	uint64_t remote_address; /* RDMA only */
	uint64_t remote_length;
	uint32_t rmr_context;
	uint32_t stage_offset; /* STAGED only, else 0 */
	uint64_t operand; /* the IB extensions only (see enum df_opcode), else 0 */
	uint64_t compare; /* CMP_SWAP only, else 0 */
	uint8_t rsvd1[8];
	struct df_wqe_segment segments[];
};
_Static_assert(sizeof(struct df_wqe) == 64, "a WQE header is 64 bytes");
_Static_assert(offsetof(struct df_wqe, operand) == 40 && offsetof(struct df_wqe, compare) == 48,
	       "operand at 40, compare at 48");
_Static_assert(sizeof(struct df_wqe) + DF_WQE_MAX_SEGMENTS * sizeof(struct df_wqe_segment)
		       <= DF_WQ_ENTRY_SIZE, "a full WQE fits its slot");

/* Event queues: one segment per EVD, "/datfabric-<ia>-eq<evd>"; the daemon produces. */
#define DF_EQ_ENTRY_SIZE 512u
#define DF_EQE_NOTIFIES 0x01u /* clear for an UNSIGNALLED completion: it wakes no waiter */
/* A receive taken from an SRQ: the body ends with the SRQ's handle (u32). */
#define DF_EQE_SRQ_RECEIVE 0x02u
#define DF_ASYNC_EVD 1u /* every IA's async EVD */

struct df_eqe {
	uint32_t event_number;
	uint8_t flags;
	uint8_t rsvd;
	uint16_t body_length;
	uint32_t ep;
	uint32_t status;
	uint64_t cookie;
	uint32_t length;
	uint32_t aux;
	uint8_t body[];
};
_Static_assert(sizeof(struct df_eqe) == 32, "an event head is 32 bytes");
#define DF_EQE_BODY_MAX (DF_EQ_ENTRY_SIZE - sizeof(struct df_eqe))

/* Frame types of the control path (proto/frames.py). */
enum df_frame {
	DF_FRAME_HELLO = 0x01,
	DF_FRAME_ERROR = 0x02,
	DF_FRAME_CALL = 0x40,
	DF_FRAME_REPLY = 0x41,
	DF_FRAME_NOTIFY = 0x43,
	DF_FRAME_DOORBELL = 0x48,
	DF_FRAME_SEGMENT_GET = 0x4C,
	DF_FRAME_SEGMENT_PUT = 0x4D,
	DF_FRAME_SEGMENT = 0x4E,
};
#define DF_MAX_HEADER_LEN 65536u

#endif
