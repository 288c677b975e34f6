/* libdatfabric's objects and the functions the object files share. */
#ifndef DF_H
#define DF_H

#include <netinet/in.h> /* DAT_SOCK_ADDR6, in dat_ib_extensions.h's structs */
#include <dat2/udat.h>
#include <dat2/dat_ib_extensions.h>
#include <dat2/dat_registry.h>
#include <msgpack.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>

#include "df_queue.h"

/* DAT_ERROR(type, subtype) of the DAT 2.0 spec: every error this provider returns carries the
 * error class bit, as the daemon's statuses do (the headers define no such macro). */
#define DF_ERROR(type, subtype) ((DAT_RETURN)(DAT_CLASS_ERROR | (type) | (subtype)))

#define DF_MAX_PRIVATE_DATA 256 /* as the daemon's max_private_data_size */
#define DF_POLL_SPIN_US 1000 /* dat_evd_dequeue: empty this long, it naps (docs/provider.md) */
#define DF_POLL_BULK 16384 /* ...or at once, if its DTO completions average this many bytes */
#define DF_POLL_NAP_US 1000 /* ...for at most this long, or until the EVD gets an event */
#define DF_MAGIC 0x64664f42u /* a live object */
#define DF_DEAD 0xdeadbeefu /* freed: its handle is no longer valid */
#define DF_EXT_ATTRS 4 /* provider-specific attributes: the IB extension's (attrs.c) */
#define DF_MAX_SRQS 4096 /* max_srqs, when the daemon's ia_query names none (attrs.c) */

struct df_ia;

/* The head of every object a handle points at. libdat2 reads the provider from a handle's
 * first word (DAT_HANDLE_TO_PROVIDER), so ``provider`` comes first. */
struct df_obj {
	DAT_PROVIDER *provider;
	uint32_t magic;
	DAT_HANDLE_TYPE type;
	DAT_CONTEXT context;
	struct df_ia *ia;
	uint32_t handle; /* the integer the control path names it by */
	struct df_obj *next; /* in the IA's list of children */
};

/* One dat.conf entry: its DAT_PROVIDER table and where its daemon listens. */
struct df_provider {
	DAT_PROVIDER dat; /* first: a DAT_PROVIDER * is a struct df_provider * */
	char ia_name[DAT_NAME_MAX_LENGTH];
	char socket_path[108];
	DAT_BOOLEAN is_thread_safe; /* as the dat.conf line says */
	struct df_provider *next;
};

/* The control path: one Unix stream per IA (registry.c has none; chan.c owns this). */
struct df_reply;
struct df_chan {
	int fd;
	int wake_fd; /* an eventfd: wakes the reader out of poll() */
	pthread_mutex_t lock; /* everything below, and the rings' driver-side state */
	pthread_cond_t cond; /* a frame was read, or the reader changed */
	pthread_mutex_t write_lock; /* one frame at a time on the socket */
	bool reading; /* a thread is in poll()/read() for all the others */
	bool dead; /* the daemon is gone (EOF, ERROR frame, broken ring) */
	bool refused; /* its ERROR said DAT_INSUFFICIENT_RESOURCES: one IA past its limit */
	uint64_t next_req;
	struct df_reply *replies; /* arrived, not yet taken */
	uint8_t *in;
	size_t in_len, in_cap;
};

struct df_ia {
	struct df_obj obj;
	struct df_provider *prov;
	struct df_chan chan;
	char name[64]; /* in HELLO: the queue segments are named after it */
	uint32_t next_evd; /* EVD handles are the driver's: 1 is the async EVD */
	struct df_evd *async_evd;
	struct df_obj *children;
	bool catastrophic_told; /* IA_CATASTROPHIC was handed out on the async EVD */
	bool broken; /* the daemon broke a ring or an entry: no ring of it is read again */
	bool unkicked; /* posted to since a kick found every queue taken (doorbell.c) */
	DAT_SOCK_ADDR6 address; /* the node's TCP address, as dat_ia_query reports it */
	struct df_reply *attrs; /* the daemon's ia_query reply, asked at dat_ia_open */
	DAT_NAMED_ATTR ext_attrs[DF_EXT_ATTRS]; /* the provider-specific ones (dat_ia_query) */
};

struct df_pz {
	struct df_obj obj;
};

struct df_evd {
	struct df_obj obj;
	DAT_COUNT qlen;
	DAT_EVD_FLAGS flags;
	DAT_CNO_HANDLE cno;
	struct df_ring ring; /* the event queue: the daemon produces */
	size_t map_len;
	uint32_t scanned; /* entries past ring.mine whose flags were counted */
	uint32_t notifying; /* of the entries up to ``scanned``, those that wake a waiter */
	uint32_t armed; /* the ARM value last stored */
	int64_t empty_since; /* dat_evd_dequeue: when its run of empty answers began (us; 0: none) */
	int64_t dto_bytes; /* the running mean of the DTO completions' transferred lengths */
	bool waiting;
	bool enabled;
	bool waitable;
};

/* A consumer notification object: wakes one waiter for the EVDs created with it. */
struct df_cno {
	struct df_obj obj;
	DAT_OS_WAIT_PROXY_AGENT agent;
	uint32_t evds; /* EVDs created with it */
	bool waiting;
};

/* A shared receive queue: its attributes and the producer side of its ring (srq.c). */
struct df_srq {
	struct df_obj obj;
	struct df_pz *pz;
	DAT_COUNT max_recv_dtos, max_recv_iov, low_watermark;
	size_t seg_len; /* the ring's segment (at ring.hdr), mapped at dat_srq_create */
	struct df_ring ring; /* the driver produces RECEIVE WQEs */
	uint32_t rung; /* DOORBELL frames sent, against the ring's HEARD */
	uint32_t kicked; /* the producer index of the last kick */
	uint32_t reaped; /* receive completions of its EPs handed out to the program */
	/* dat_srq_resize and dat_srq_set_lw one at a time (taken before the channel's lock): the
	 * watermark one checks against the size is the one the other sets */
	pthread_mutex_t config;
};

/* An endpoint: what the driver needs to answer its calls and posts synchronously. */
struct df_ep {
	struct df_obj obj;
	struct df_pz *pz; /* NULL: none yet (dat_ep_modify sets one) */
	struct df_srq *srq; /* dat_ep_create_with_srq: its receives come from there; else NULL */
	struct df_evd *recv_evd, *request_evd, *connect_evd;
	DAT_EP_ATTR attr; /* as the daemon granted them */
	DAT_EP_STATE known; /* the state until the queues are mapped (then: the STATE word) */
	void *wq; /* the work queue segment, mapped on first use; NULL before */
	size_t wq_len;
	struct df_ring sq, rq; /* the driver produces */
	uint32_t rung; /* DOORBELL frames sent, against the SQ's HEARD */
	uint32_t kicked_sq, kicked_rq; /* producer indices of the last kick */
	uint32_t binds; /* RMR binds made, against the SQ's BOUND */
	/* the staging area (stage.c): bytes taken and given back, free-running */
	uint32_t stage_head, stage_tail;
	uint32_t stage_done; /* the SQ's DONE that stage_tail reflects */
	uint32_t *stage_marks; /* per SQ slot: stage_head after that post; NULL until one stages */
	bool provided; /* made by a PSP with the PROVIDER flag for a request */
	/* the connection, as connection management learned it (cm.c, events.c) */
	DAT_SOCK_ADDR6 remote_address;
	DAT_CONN_QUAL remote_port_qual;
	DAT_CONN_QUAL local_port_qual;
	uint8_t private_data[DF_MAX_PRIVATE_DATA]; /* of the last connection event */
	DAT_COUNT private_data_size;
};

/* A PSP or RSP (obj.type says which). */
struct df_sp {
	struct df_obj obj;
	DAT_CONN_QUAL conn_qual;
	struct df_evd *evd;
	DAT_PSP_FLAGS flags;
	struct df_ep *ep; /* an RSP's EP */
};

/* A connection request, made when its CONNECTION_REQUEST event is handed out. */
struct df_cr {
	struct df_obj obj;
	DAT_CONN_QUAL conn_qual;
	DAT_SOCK_ADDR6 remote_address;
	struct df_ep *ep; /* the EP the request carries (RSP, or a PSP's PROVIDER EP), or NULL */
	uint8_t private_data[DF_MAX_PRIVATE_DATA];
	DAT_COUNT private_data_size;
};

/* A registered memory region: enough to check a post's local segments. */
struct df_lmr {
	struct df_obj obj;
	struct df_pz *pz;
	DAT_MEM_TYPE mem_type;
	DAT_REGION_DESCRIPTION region;
	DAT_LMR_CONTEXT lmr_context;
	DAT_RMR_CONTEXT rmr_context;
	DAT_VADDR address;
	DAT_VLEN length;
	DAT_MEM_PRIV_FLAGS privileges; /* as asked (dat_lmr_query) */
	DAT_MEM_PRIV_FLAGS granted; /* as registered: see df_granted_privileges */
	DAT_VA_TYPE va_type;
};

/* A memory window: what dat_rmr_query reports of its last bind. */
struct df_rmr {
	struct df_obj obj;
	struct df_pz *pz;
	struct df_lmr *lmr; /* NULL: unbound */
	DAT_LMR_TRIPLET triplet;
	DAT_MEM_PRIV_FLAGS privileges;
	DAT_VA_TYPE va_type;
	DAT_RMR_CONTEXT rmr_context;
	DAT_RMR_SCOPE scope; /* EP: made by dat_rmr_create_for_ep */
};

/* registry.c */
struct df_provider *df_registry_find(const char *ia_name, DAT_BOOLEAN thread_safe);
DAT_RETURN df_ia_open_threadsafe(const DAT_NAME_PTR, DAT_COUNT, DAT_EVD_HANDLE *, DAT_IA_HANDLE *);
void DAT_API dat_provider_init(const DAT_PROVIDER_INFO *info, const char *instance_data);
void DAT_API dat_provider_fini(const DAT_PROVIDER_INFO *info);

/* The DAT_PROVIDER entry points offered (ia.c, objects.c, evd.c, pz.c) */
DAT_RETURN df_ia_open(const DAT_NAME_PTR, DAT_COUNT, DAT_EVD_HANDLE *, DAT_IA_HANDLE *);
DAT_RETURN df_ia_query(DAT_IA_HANDLE, DAT_EVD_HANDLE *, DAT_IA_ATTR_MASK, DAT_IA_ATTR *, DAT_PROVIDER_ATTR_MASK, DAT_PROVIDER_ATTR *);
DAT_RETURN df_ia_close(DAT_IA_HANDLE, DAT_CLOSE_FLAGS);
DAT_RETURN df_set_consumer_context(DAT_HANDLE, DAT_CONTEXT);
DAT_RETURN df_get_consumer_context(DAT_HANDLE, DAT_CONTEXT *);
DAT_RETURN df_get_handle_type(DAT_HANDLE, DAT_HANDLE_TYPE *);
DAT_RETURN df_evd_create(DAT_IA_HANDLE, DAT_COUNT, DAT_CNO_HANDLE, DAT_EVD_FLAGS, DAT_EVD_HANDLE *);
DAT_RETURN df_evd_query(DAT_EVD_HANDLE, DAT_EVD_PARAM_MASK, DAT_EVD_PARAM *);
DAT_RETURN df_evd_enable(DAT_EVD_HANDLE);
DAT_RETURN df_evd_disable(DAT_EVD_HANDLE);
DAT_RETURN df_evd_wait(DAT_EVD_HANDLE, DAT_TIMEOUT, DAT_COUNT, DAT_EVENT *, DAT_COUNT *);
DAT_RETURN df_evd_post_se(DAT_EVD_HANDLE, const DAT_EVENT *);
DAT_RETURN df_evd_dequeue(DAT_EVD_HANDLE, DAT_EVENT *);
DAT_RETURN df_evd_free(DAT_EVD_HANDLE);
DAT_RETURN df_pz_create(DAT_IA_HANDLE, DAT_PZ_HANDLE *);
DAT_RETURN df_pz_query(DAT_PZ_HANDLE, DAT_PZ_PARAM_MASK, DAT_PZ_PARAM *);
DAT_RETURN df_pz_free(DAT_PZ_HANDLE);
DAT_RETURN df_evd_set_unwaitable(DAT_EVD_HANDLE);
DAT_RETURN df_evd_clear_unwaitable(DAT_EVD_HANDLE);
DAT_RETURN df_evd_modify_cno(DAT_EVD_HANDLE, DAT_CNO_HANDLE);
DAT_RETURN df_evd_resize(DAT_EVD_HANDLE, DAT_COUNT);

/* Arguments of the calls that name one object and one value: [handle, value]. */
struct df_pair {
	uint32_t handle;
	uint64_t value;
};
void df_pack_pair(msgpack_packer *pk, const void *arg);

/* chan.c: the socket and its frames; call.c: calls and replies */
typedef void (*df_pack_fn)(msgpack_packer *pk, const void *arg);
DAT_RETURN df_chan_open(struct df_chan *ch, const char *path, const char *name);
void df_chan_close(struct df_chan *ch);
DAT_RETURN df_call(struct df_ia *ia, const char *method, df_pack_fn pack, const void *arg,
		   struct df_reply **out);
const msgpack_object_array *df_result(const struct df_reply *r);
void df_reply_free(struct df_reply *r);
bool df_pump_locked(struct df_chan *ch, const struct timespec *deadline);
void df_frame_begin(msgpack_sbuffer *sb, msgpack_packer *pk, enum df_frame type, size_t fields);
bool df_send_frame(struct df_chan *ch, msgpack_sbuffer *sb);
void df_send_bytes_locked(struct df_chan *ch, uint8_t *frame, size_t len);
void df_keep_reply(struct df_chan *ch, uint64_t req_id, const uint8_t *hdr, uint32_t len);
void df_drop_replies(struct df_chan *ch);
void df_chan_interrupt(struct df_chan *ch);
void df_chan_kill(struct df_chan *ch, const char *reason);
bool df_chan_dead(struct df_chan *ch);
DAT_RETURN df_result_u64(const struct df_reply *r, uint32_t index, uint64_t *value);
DAT_RETURN df_call_u64(struct df_ia *ia, const char *method, df_pack_fn pack, const void *arg,
		       uint64_t *value);
const msgpack_object *df_map_get(const msgpack_object *map, const char *key);

/* objects.c */
void *df_obj_new(struct df_ia *ia, size_t size, DAT_HANDLE_TYPE type, uint32_t handle);
void *df_obj_new_locked(struct df_ia *ia, size_t size, DAT_HANDLE_TYPE type, uint32_t handle);
void df_obj_release(struct df_obj *obj);
void df_obj_release_locked(struct df_obj *obj);
void *df_obj_check(const void *handle, DAT_HANDLE_TYPE type);
void df_pack_handle(msgpack_packer *pk, const void *handle);
DAT_RETURN df_free_object(struct df_obj *obj, const char *method);

/* ep.c, ep_attr.c */
DAT_RETURN df_ep_create(DAT_IA_HANDLE, DAT_PZ_HANDLE, DAT_EVD_HANDLE, DAT_EVD_HANDLE, DAT_EVD_HANDLE,
			const DAT_EP_ATTR *, DAT_EP_HANDLE *);
DAT_RETURN df_ep_query(DAT_EP_HANDLE, DAT_EP_PARAM_MASK, DAT_EP_PARAM *);
DAT_RETURN df_ep_modify(DAT_EP_HANDLE, DAT_EP_PARAM_MASK, const DAT_EP_PARAM *);
DAT_RETURN df_ep_free(DAT_EP_HANDLE);
DAT_RETURN df_ep_get_status(DAT_EP_HANDLE, DAT_EP_STATE *, DAT_BOOLEAN *, DAT_BOOLEAN *);
DAT_RETURN df_ep_recv_query(DAT_EP_HANDLE, DAT_COUNT *, DAT_COUNT *); /* ep_recv.c */
DAT_RETURN df_ep_set_watermark(DAT_EP_HANDLE, DAT_COUNT, DAT_COUNT);
struct df_ep *df_ep_new(struct df_ia *ia, uint32_t handle, DAT_EP_STATE known);
void df_ep_destroy(struct df_ep *ep);
DAT_RETURN df_ep_queues(struct df_ep *ep);
DAT_EP_STATE df_ep_state(const struct df_ep *ep);
DAT_RETURN df_ep_state_error(DAT_EP_STATE state);
uint32_t df_ep_requests(const struct df_ep *ep);
uint32_t df_ep_recvs(const struct df_ep *ep);
void df_pack_ep_attr(msgpack_packer *pk, const struct df_ia *ia, const DAT_EP_ATTR *a);
DAT_RETURN df_read_ep_attr(const msgpack_object *map, DAT_EP_ATTR *out);
void df_merge_ep_attr(DAT_EP_ATTR *into, const DAT_EP_ATTR *from, DAT_EP_PARAM_MASK mask);

/* lmr.c, rmr.c */
DAT_RETURN df_lmr_create(DAT_IA_HANDLE, DAT_MEM_TYPE, DAT_REGION_DESCRIPTION, DAT_VLEN,
			 DAT_PZ_HANDLE, DAT_MEM_PRIV_FLAGS, DAT_VA_TYPE, DAT_LMR_HANDLE *,
			 DAT_LMR_CONTEXT *, DAT_RMR_CONTEXT *, DAT_VLEN *, DAT_VADDR *);
DAT_RETURN df_lmr_query(DAT_LMR_HANDLE, DAT_LMR_PARAM_MASK, DAT_LMR_PARAM *);
DAT_RETURN df_lmr_free(DAT_LMR_HANDLE);
DAT_RETURN df_lmr_sync_rdma_read(DAT_IA_HANDLE, const DAT_LMR_TRIPLET *, DAT_VLEN);
DAT_RETURN df_lmr_sync_rdma_write(DAT_IA_HANDLE, const DAT_LMR_TRIPLET *, DAT_VLEN);
struct df_lmr *df_lmr_find(struct df_ia *ia, DAT_LMR_CONTEXT context);
DAT_MEM_PRIV_FLAGS df_granted_privileges(DAT_MEM_PRIV_FLAGS asked);
DAT_RETURN df_rmr_create(DAT_PZ_HANDLE, DAT_RMR_HANDLE *);
DAT_RETURN df_rmr_create_for_ep(DAT_PZ_HANDLE, DAT_RMR_HANDLE *);
DAT_RETURN df_rmr_bind(DAT_RMR_HANDLE, DAT_LMR_HANDLE, const DAT_LMR_TRIPLET *, DAT_MEM_PRIV_FLAGS,
		       DAT_VA_TYPE, DAT_EP_HANDLE, DAT_RMR_COOKIE, DAT_COMPLETION_FLAGS,
		       DAT_RMR_CONTEXT *);
DAT_RETURN df_rmr_query(DAT_RMR_HANDLE, DAT_RMR_PARAM_MASK, DAT_RMR_PARAM *);
DAT_RETURN df_rmr_free(DAT_RMR_HANDLE);

#include "df_post.h" /* the data path: posts, doorbells, SRQs, the extensions, staging */

/* ia.c, attrs.c, events.c */
DAT_RETURN df_ia_fetch_attributes(struct df_ia *ia);
uint64_t df_ia_attr(const struct df_ia *ia, const char *key);
void df_ia_break(struct df_ia *ia, const char *reason);
void *df_ia_find(struct df_ia *ia, DAT_HANDLE_TYPE type, uint64_t handle);
struct df_eqe;
DAT_RETURN df_event_from_entry(struct df_ia *ia, const struct df_eqe *e, DAT_EVENT *event);

/* evd.c */
DAT_RETURN df_evd_make(struct df_ia *ia, DAT_COUNT qlen, DAT_EVD_FLAGS flags, uint32_t handle,
		       struct df_evd **out);
void df_evd_destroy(struct df_evd *evd);

/* evd_take.c */
int64_t df_evd_refill(struct df_evd *evd);
void df_evd_arm(struct df_evd *evd, DAT_COUNT threshold);
void df_deadline_after(struct timespec *ts, DAT_TIMEOUT us);
bool df_deadline_passed(const struct timespec *deadline);

/* cno.c */
DAT_RETURN df_cno_create(DAT_IA_HANDLE, DAT_OS_WAIT_PROXY_AGENT, DAT_CNO_HANDLE *);
DAT_RETURN df_cno_modify_agent(DAT_CNO_HANDLE, DAT_OS_WAIT_PROXY_AGENT);
DAT_RETURN df_cno_query(DAT_CNO_HANDLE, DAT_CNO_PARAM_MASK, DAT_CNO_PARAM *);
DAT_RETURN df_cno_free(DAT_CNO_HANDLE);
DAT_RETURN df_cno_wait(DAT_CNO_HANDLE, DAT_TIMEOUT, DAT_EVD_HANDLE *);

/* cm.c, sp.c, cr.c */
DAT_RETURN df_ep_connect(DAT_EP_HANDLE, DAT_IA_ADDRESS_PTR, DAT_CONN_QUAL, DAT_TIMEOUT, DAT_COUNT,
			 const DAT_PVOID, DAT_QOS, DAT_CONNECT_FLAGS);
DAT_RETURN df_ep_dup_connect(DAT_EP_HANDLE, DAT_EP_HANDLE, DAT_TIMEOUT, DAT_COUNT, const DAT_PVOID,
			     DAT_QOS);
DAT_RETURN df_ep_disconnect(DAT_EP_HANDLE, DAT_CLOSE_FLAGS);
DAT_RETURN df_ep_reset(DAT_EP_HANDLE);
DAT_RETURN df_psp_create(DAT_IA_HANDLE, DAT_CONN_QUAL, DAT_EVD_HANDLE, DAT_PSP_FLAGS,
			 DAT_PSP_HANDLE *);
DAT_RETURN df_psp_create_any(DAT_IA_HANDLE, DAT_CONN_QUAL *, DAT_EVD_HANDLE, DAT_PSP_FLAGS,
			     DAT_PSP_HANDLE *);
DAT_RETURN df_psp_query(DAT_PSP_HANDLE, DAT_PSP_PARAM_MASK, DAT_PSP_PARAM *);
DAT_RETURN df_psp_free(DAT_PSP_HANDLE);
DAT_RETURN df_rsp_create(DAT_IA_HANDLE, DAT_CONN_QUAL, DAT_EP_HANDLE, DAT_EVD_HANDLE,
			 DAT_RSP_HANDLE *);
DAT_RETURN df_rsp_query(DAT_RSP_HANDLE, DAT_RSP_PARAM_MASK, DAT_RSP_PARAM *);
DAT_RETURN df_rsp_free(DAT_RSP_HANDLE);
DAT_RETURN df_cr_query(DAT_CR_HANDLE, DAT_CR_PARAM_MASK, DAT_CR_PARAM *);
DAT_RETURN df_cr_accept(DAT_CR_HANDLE, DAT_EP_HANDLE, DAT_COUNT, const DAT_PVOID);
DAT_RETURN df_cr_reject(DAT_CR_HANDLE, DAT_COUNT, const DAT_PVOID);
DAT_RETURN df_cr_handoff(DAT_CR_HANDLE, DAT_CONN_QUAL);
void df_parse_address(const msgpack_object *o, DAT_SOCK_ADDR6 *out);
struct df_cr *df_cr_from_request(struct df_ia *ia, const msgpack_object *f, struct df_sp **sp);

/* shm.c */
void *df_shm_map(const struct df_ia *ia, const char *name, size_t *len);
void df_shm_unmap(void *base, size_t len);
void df_segment_name(char *out, size_t size, const struct df_ia *ia, const char *kind,
		     uint32_t handle);

#endif
