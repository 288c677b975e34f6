/* The DAT registry's view of libdatfabric: dat_provider_init/fini and the DAT_PROVIDER table.
 *
 * libdat2 calls dat_provider_init once per dat.conf line naming this library, with the line's
 * ia_params (the node's consumer socket) as instance data. Each line gets its own table, so an
 * IA finds its daemon from the provider it was opened through. The list of those tables is the
 * library's only global state. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "df.h"

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct df_provider *registry;

/* Entry points not offered: those declined with DAT_MODEL_NOT_SUPPORTED as OFED's dapl declines them (CSP, and ep_common_connect, which
 * connects through one; send with invalidate, read to RMR, CNO fds and triggers, HA), the same
 * as the Python client answers (client/common.py, DECLINED; docs/provider.md). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define MNS(name, ...)                                       \
	static DAT_RETURN DAT_API ni_##name(__VA_ARGS__)     \
	{                                                    \
		return DF_ERROR(DAT_MODEL_NOT_SUPPORTED, 0);              \
	}
MNS(csp_create, DAT_IA_HANDLE a0, DAT_COMM *a1, DAT_IA_ADDRESS_PTR a2, DAT_EVD_HANDLE a3, DAT_CSP_HANDLE *a4)
MNS(csp_query, DAT_CSP_HANDLE a0, DAT_CSP_PARAM_MASK a1, DAT_CSP_PARAM *a2)
MNS(csp_free, DAT_CSP_HANDLE a0)
MNS(ep_common_connect, DAT_EP_HANDLE a0, DAT_IA_ADDRESS_PTR a1, DAT_TIMEOUT a2, DAT_COUNT a3, const DAT_PVOID a4)
MNS(ep_post_send_with_invalidate, DAT_EP_HANDLE a0, DAT_COUNT a1, DAT_LMR_TRIPLET *a2, DAT_DTO_COOKIE a3, DAT_COMPLETION_FLAGS a4, DAT_BOOLEAN a5, DAT_RMR_CONTEXT a6)
MNS(ep_post_rdma_read_to_rmr, DAT_EP_HANDLE a0, const DAT_RMR_TRIPLET *a1, DAT_DTO_COOKIE a2, const DAT_RMR_TRIPLET *a3, DAT_COMPLETION_FLAGS a4)
MNS(cno_fd_create, DAT_IA_HANDLE a0, DAT_FD *a1, DAT_CNO_HANDLE *a2)
MNS(cno_trigger, DAT_CNO_HANDLE a0, DAT_EVD_HANDLE *a1)
MNS(ia_ha_related, DAT_IA_HANDLE a0, const DAT_NAME_PTR a1, DAT_BOOLEAN *a2)
#pragma GCC diagnostic pop

static const DAT_PROVIDER template = {
	.device_name = NULL,
	.extension = NULL,
	.ia_open_func = df_ia_open,
	.ia_query_func = df_ia_query,
	.ia_close_func = df_ia_close,
	.set_consumer_context_func = df_set_consumer_context,
	.get_consumer_context_func = df_get_consumer_context,
	.get_handle_type_func = df_get_handle_type,
	.cno_create_func = df_cno_create,
	.cno_modify_agent_func = df_cno_modify_agent,
	.cno_query_func = df_cno_query,
	.cno_free_func = df_cno_free,
	.cno_wait_func = df_cno_wait,
	.cr_query_func = df_cr_query,
	.cr_accept_func = df_cr_accept,
	.cr_reject_func = df_cr_reject,
	.cr_handoff_func = df_cr_handoff,
	.evd_create_func = df_evd_create,
	.evd_query_func = df_evd_query,
	.evd_modify_cno_func = df_evd_modify_cno,
	.evd_enable_func = df_evd_enable,
	.evd_disable_func = df_evd_disable,
	.evd_wait_func = df_evd_wait,
	.evd_resize_func = df_evd_resize,
	.evd_post_se_func = df_evd_post_se,
	.evd_dequeue_func = df_evd_dequeue,
	.evd_free_func = df_evd_free,
	.ep_create_func = df_ep_create,
	.ep_query_func = df_ep_query,
	.ep_modify_func = df_ep_modify,
	.ep_connect_func = df_ep_connect,
	.ep_dup_connect_func = df_ep_dup_connect,
	.ep_disconnect_func = df_ep_disconnect,
	.ep_post_send_func = df_ep_post_send,
	.ep_post_recv_func = df_ep_post_recv,
	.ep_post_rdma_read_func = df_ep_post_rdma_read,
	.ep_post_rdma_write_func = df_ep_post_rdma_write,
	.ep_get_status_func = df_ep_get_status,
	.ep_free_func = df_ep_free,
	.lmr_create_func = df_lmr_create,
	.lmr_query_func = df_lmr_query,
	.lmr_free_func = df_lmr_free,
	.rmr_create_func = df_rmr_create,
	.rmr_query_func = df_rmr_query,
	.rmr_bind_func = df_rmr_bind,
	.rmr_free_func = df_rmr_free,
	.psp_create_func = df_psp_create,
	.psp_query_func = df_psp_query,
	.psp_free_func = df_psp_free,
	.rsp_create_func = df_rsp_create,
	.rsp_query_func = df_rsp_query,
	.rsp_free_func = df_rsp_free,
	.pz_create_func = df_pz_create,
	.pz_query_func = df_pz_query,
	.pz_free_func = df_pz_free,
	.psp_create_any_func = df_psp_create_any,
	.ep_reset_func = df_ep_reset,
	.evd_set_unwaitable_func = df_evd_set_unwaitable,
	.evd_clear_unwaitable_func = df_evd_clear_unwaitable,
	.lmr_sync_rdma_read_func = df_lmr_sync_rdma_read,
	.lmr_sync_rdma_write_func = df_lmr_sync_rdma_write,
	.ep_create_with_srq_func = df_ep_create_with_srq,
	.ep_recv_query_func = df_ep_recv_query,
	.ep_set_watermark_func = df_ep_set_watermark,
	.srq_create_func = df_srq_create,
	.srq_free_func = df_srq_free,
	.srq_post_recv_func = df_srq_post_recv,
	.srq_query_func = df_srq_query,
	.srq_resize_func = df_srq_resize,
	.srq_set_lw_func = df_srq_set_lw,
	.csp_create_func = ni_csp_create,
	.csp_query_func = ni_csp_query,
	.csp_free_func = ni_csp_free,
	.ep_common_connect_func = ni_ep_common_connect,
	.rmr_create_for_ep_func = df_rmr_create_for_ep,
	.ep_post_send_with_invalidate_func = ni_ep_post_send_with_invalidate,
	.ep_post_rdma_read_to_rmr_func = ni_ep_post_rdma_read_to_rmr,
	.cno_fd_create_func = ni_cno_fd_create,
	.cno_trigger_func = ni_cno_trigger,
	.ia_ha_related_func = ni_ia_ha_related,
	.handle_extendedop_func = df_handle_extendedop,};

struct df_provider *df_registry_find(const char *ia_name, DAT_BOOLEAN thread_safe)
{
	pthread_mutex_lock(&registry_lock);
	struct df_provider *p = registry;
	while (p && (strcmp(p->ia_name, ia_name) || p->is_thread_safe != thread_safe))
		p = p->next;
	pthread_mutex_unlock(&registry_lock);
	return p;
}

__attribute__((visibility("default"))) void DAT_API
dat_provider_init(const DAT_PROVIDER_INFO *info, const char *instance_data)
{
	if (!info || !instance_data || !*instance_data) {
		fprintf(stderr, "libdatfabric: the dat.conf line of %s names no daemon socket\n",
			info ? info->ia_name : "?");
		return;
	}
	struct df_provider *p = calloc(1, sizeof(*p));
	if (!p)
		return;
	p->dat = template;
	snprintf(p->ia_name, sizeof(p->ia_name), "%s", info->ia_name);
	snprintf(p->socket_path, sizeof(p->socket_path), "%s", instance_data);
	p->dat.device_name = p->ia_name;
	/* libdat2 finds a provider by name, version and thread safety, and a program asks for the
	 * DAT_THREADSAFE it was compiled with (by default DAT_FALSE); dat_ia_close finds it again
	 * from what dat_ia_query reports. The library is thread safe either way, so dat.conf
	 * names the IA twice (threadsafe and nonthreadsafe) and each IA reports the line it was
	 * opened through: ia_open is told which by the entry point libdat2 calls. */
	p->is_thread_safe = info->is_thread_safe;
	p->dat.ia_open_func = info->is_thread_safe ? df_ia_open_threadsafe : df_ia_open;
	if (dat_registry_add_provider(&p->dat, info) != DAT_SUCCESS) {
		free(p);
		return;
	}
	pthread_mutex_lock(&registry_lock);
	p->next = registry;
	registry = p;
	pthread_mutex_unlock(&registry_lock);
}

__attribute__((visibility("default"))) void DAT_API
dat_provider_fini(const DAT_PROVIDER_INFO *info)
{
	pthread_mutex_lock(&registry_lock);
	struct df_provider **at = &registry;
	while (*at && (strcmp((*at)->ia_name, info->ia_name) ||
		       (*at)->is_thread_safe != info->is_thread_safe))
		at = &(*at)->next;
	struct df_provider *p = *at;
	if (p)
		*at = p->next;
	pthread_mutex_unlock(&registry_lock);
	if (p) {
		dat_registry_remove_provider(&p->dat, info);
		free(p);
	}
}
