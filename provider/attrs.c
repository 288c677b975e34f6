/* dat_ia_query: the IA and provider attributes, from what the daemon reported at open. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "df.h"

static void copy_name(char *dst, const msgpack_object *o)
{
	if (o && o->type == MSGPACK_OBJECT_STR) {
		size_t n = o->via.str.size < DAT_NAME_MAX_LENGTH - 1 ? o->via.str.size
								      : DAT_NAME_MAX_LENGTH - 1;
		memcpy(dst, o->via.str.ptr, n);
		dst[n] = '\0';
	}
}

static uint64_t attr_u64(const msgpack_object *attrs, const char *key)
{
	const msgpack_object *o = df_map_get(attrs, key);
	if (o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
		return o->via.u64;
	return o && o->type == MSGPACK_OBJECT_BOOLEAN ? o->via.boolean : 0;
}

static DAT_COUNT count(uint64_t v)
{
	return v > INT32_MAX ? INT32_MAX : (DAT_COUNT)v;
}

/* An attribute the daemon may leave out: its value, or ``fallback``. */
static DAT_COUNT count_or(const msgpack_object *attrs, const char *key, DAT_COUNT fallback)
{
	return df_map_get(attrs, key) ? count(attr_u64(attrs, key)) : fallback;
}

/* A DAT_SEG_LENGTH is 32 bits: a larger limit reads as its maximum. */
static DAT_SEG_LENGTH seg_length(uint64_t v)
{
	return v > UINT32_MAX ? UINT32_MAX : (DAT_SEG_LENGTH)v;
}

/* A "host:port" string the daemon gives (a node's address) as a sockaddr_in; an address
 * that is not an IPv4 literal reads as loopback. */
void df_parse_address(const msgpack_object *o, DAT_SOCK_ADDR6 *out)
{
	char text[64] = "";
	if (o && o->type == MSGPACK_OBJECT_STR && o->via.str.size < sizeof(text))
		memcpy(text, o->via.str.ptr, o->via.str.size);
	char *colon = strrchr(text, ':');
	struct sockaddr_in *sin = (struct sockaddr_in *)out;
	memset(out, 0, sizeof(*out));
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (colon) {
		*colon = '\0';
		sin->sin_port = htons((uint16_t)atoi(colon + 1));
		if (inet_pton(AF_INET, text, &sin->sin_addr) != 1)
			sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	}
}

static void fill_ia_attr(struct df_ia *ia, const msgpack_object *a, DAT_IA_ATTR *attr)
{
	memset(attr, 0, sizeof(*attr));
	copy_name(attr->adapter_name, df_map_get(a, "adapter_name"));
	copy_name(attr->vendor_name, df_map_get(a, "vendor_name"));
	attr->ia_address_ptr = (DAT_IA_ADDRESS_PTR)&ia->address;
	attr->max_eps = count(attr_u64(a, "max_eps"));
	attr->max_dto_per_ep = count(attr_u64(a, "max_dto_per_ep"));
	attr->max_rdma_read_per_ep_in = count(attr_u64(a, "max_rdma_read_per_ep_in"));
	attr->max_rdma_read_per_ep_out = count(attr_u64(a, "max_rdma_read_per_ep_out"));
	attr->max_evds = count(attr_u64(a, "max_evds"));
	attr->max_evd_qlen = count(attr_u64(a, "max_evd_qlen"));
	attr->max_iov_segments_per_dto = count(attr_u64(a, "max_iov_segments_per_dto"));
	attr->max_lmrs = count(attr_u64(a, "max_lmrs"));
	attr->max_lmr_block_size = seg_length(attr_u64(a, "max_lmr_block_size"));
	attr->max_lmr_virtual_address = UINT64_MAX;
	attr->max_pzs = count(attr_u64(a, "max_pzs"));
	attr->max_message_size = seg_length(attr_u64(a, "max_message_size"));
	attr->max_rdma_size = seg_length(attr_u64(a, "max_rdma_size"));
	attr->max_rmrs = count(attr_u64(a, "max_rmrs"));
	attr->max_rmr_target_address = UINT64_MAX;
	/* SRQs: the daemon's figures where it gives them; else its per-IA default of SRQs, any EP
	 * of the IA on one SRQ, and the receives one SRQ's ring holds */
	attr->max_srqs = count_or(a, "max_srqs", DF_MAX_SRQS);
	attr->max_ep_per_srq = count_or(a, "max_ep_per_srq", attr->max_eps);
	attr->max_recv_per_srq = count_or(a, "max_recv_per_srq", (DAT_COUNT)DF_WQ_ENTRIES);
	attr->max_iov_segments_per_rdma_read = attr->max_iov_segments_per_dto;
	attr->max_iov_segments_per_rdma_write = attr->max_iov_segments_per_dto;
	attr->max_rdma_read_in = attr->max_rdma_read_per_ep_in;
	attr->max_rdma_read_out = attr->max_rdma_read_per_ep_out;
	attr->max_rdma_read_per_ep_in_guaranteed = DAT_TRUE;
	attr->max_rdma_read_per_ep_out_guaranteed = DAT_TRUE;
	attr->extension_supported = DAT_EXTENSION_IB; /* ext.c */
	attr->extension_version = DAT_IB_EXTENSION_VERSION;
}

static void fill_provider_attr(struct df_ia *ia, const msgpack_object *a, DAT_PROVIDER_ATTR *p)
{
	/* evd_stream_merging_supported is a const member: the struct is the caller's, filled once */
	static const DAT_BOOLEAN merging[6][6] = {
		{ DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE },
		{ DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE },
		{ DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE },
		{ DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE },
		{ DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE },
		{ DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE, DAT_TRUE },
	};
	memset(p, 0, sizeof(*p));
	snprintf(p->provider_name, sizeof(p->provider_name), "%s", ia->prov->ia_name);
	p->provider_version_major = 2;
	p->provider_version_minor = 0;
	p->dapl_version_major = DAT_VERSION_MAJOR;
	p->dapl_version_minor = DAT_VERSION_MINOR;
	p->lmr_mem_types_supported =
		DAT_MEM_TYPE_VIRTUAL | DAT_MEM_TYPE_LMR | DAT_MEM_TYPE_SHARED_VIRTUAL;
	p->iov_ownership_on_return = DAT_IOV_CONSUMER;
	p->dat_qos_supported = DAT_QOS_BEST_EFFORT;
	p->completion_flags_supported = DAT_COMPLETION_DEFAULT_FLAG;
	p->is_thread_safe = ia->prov->is_thread_safe; /* libdat2 finds the line by it */
	p->max_private_data_size = count(attr_u64(a, "max_private_data_size"));
	p->supports_multipath = DAT_FALSE;
	p->ep_creator = DAT_PSP_CREATES_EP_IFASKED;
	p->pz_support = DAT_PZ_UNIQUE;
	p->optimal_buffer_alignment = (DAT_UINT32)attr_u64(a, "optimal_buffer_alignment");
	memcpy((void *)p->evd_stream_merging_supported, merging, sizeof(merging));
	p->lmr_sync_req = attr_u64(a, "lmr_sync_req") ? DAT_TRUE : DAT_FALSE;
	p->dto_async_return_guaranteed = DAT_TRUE;
	p->rdma_write_for_rdma_read_req = DAT_FALSE;
	/* SRQs (srq.c): the low watermark event and dat_srq_query's counts; an EP of an SRQ is in
	 * the SRQ's PZ */
	p->srq_supported = DAT_TRUE;
	p->srq_watermarks_supported = DAT_TRUE;
	p->srq_ep_pz_difference_supported = DAT_FALSE;
	p->srq_info_supported = DAT_TRUE;
	p->ep_recv_info_supported = DAT_TRUE; /* dat_ep_recv_query answers both counts */
	p->rmr_scope_supported = DAT_RMR_SCOPE_ANY; /* rmr_create (PZ), rmr_create_for_ep (EP) */
	p->num_provider_specific_attr = DF_EXT_ATTRS;
	p->provider_specific_attr = ia->ext_attrs;
}

/* The daemon's attributes, asked once at dat_ia_open: dat_ia_query must answer after the
 * daemon died too (libdat2's dat_ia_close queries the provider attributes before closing). */
DAT_RETURN df_ia_fetch_attributes(struct df_ia *ia)
{
	DAT_RETURN ret = df_call(ia, "ia_query", NULL, NULL, &ia->attrs);
	if (ret != DAT_SUCCESS)
		return ret;
	const msgpack_object_array *res = df_result(ia->attrs);
	if (res->size < 1 || res->ptr[0].type != MSGPACK_OBJECT_MAP)
		return DF_ERROR(DAT_INTERNAL_ERROR, 0);
	df_parse_address(df_map_get(&res->ptr[0], "ia_address"), &ia->address);
	/* the provider-specific attributes: the IB extension's operations offered (ext.c), by the
	 * names its header gives them; the IA keeps them, as the callers' structs point at them */
	ia->ext_attrs[0] = (DAT_NAMED_ATTR){DAT_IB_ATTR_FETCH_AND_ADD, "TRUE"};
	ia->ext_attrs[1] = (DAT_NAMED_ATTR){DAT_IB_ATTR_CMP_AND_SWAP, "TRUE"};
	ia->ext_attrs[2] = (DAT_NAMED_ATTR){DAT_IB_ATTR_IMMED_DATA, "TRUE"};
	/* the message size programs may size their buffers by (OFED's dapl reports its port's
	 * MTU; dtestsrq reads it): a hint, not a limit, which is max_message_size */
	ia->ext_attrs[3] = (DAT_NAMED_ATTR){"DAT_IB_TRANSPORT_MTU", "2048"};
	return DAT_SUCCESS;
}

DAT_RETURN df_ia_query(DAT_IA_HANDLE handle, DAT_EVD_HANDLE *async_evd, DAT_IA_ATTR_MASK ia_mask,
		       DAT_IA_ATTR *ia_attr, DAT_PROVIDER_ATTR_MASK pr_mask,
		       DAT_PROVIDER_ATTR *pr_attr)
{
	struct df_ia *ia = df_obj_check(handle, DAT_HANDLE_TYPE_IA);
	if (!ia)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
	if (ia_mask && !ia_attr)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
	if (pr_mask && !pr_attr)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6);
	if (async_evd)
		*async_evd = ia->async_evd;
	const msgpack_object *attrs = &df_result(ia->attrs)->ptr[0];
	if (ia_mask)
		fill_ia_attr(ia, attrs, ia_attr);
	if (pr_mask)
		fill_provider_attr(ia, attrs, pr_attr);
	return DAT_SUCCESS;
}


/* One of the attributes the daemon reported at dat_ia_open (0 if it has no such one). */
uint64_t df_ia_attr(const struct df_ia *ia, const char *key)
{
	return attr_u64(&df_result(ia->attrs)->ptr[0], key);
}
