//! The node over real QUIC on 127.0.0.1, with the emulator and real worker processes: remote
//! runs against local ones, refusals, isolation, malformed input, dying and stalling peers,
//! expiry, drain, GPU_SUBMIT, deployed tasklets, `/metrics` over real TCP, and nodes in a cluster
//! on a real nats-server.
//!
//! One binary with its own harness (libtest-mimic), because it plays three parts: the tests;
//! the GPU worker program its nodes start (`worker …`, as a daemon embedding the node does);
//! and the processes the tests kill (`serve-node`, `hold-lease`).

mod cluster;
mod deploy;
mod forks;
mod groups;
mod isolation;
mod lifecycle;
mod malformed;
mod metrics;
mod nats;
mod oneshot;
mod refusals;
mod remote;
mod stream_ops;
mod streams;
mod submit;
mod support;
mod tenant_totals;

use libtest_mimic::{Arguments, Trial};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("worker") => {
            return ExitCode::from(tasklet_worker::serve_main(args.into_iter().skip(2)) as u8)
        }
        Some("serve-node") => lifecycle::serve_node(&args[2..]),
        Some("hold-lease") => lifecycle::hold_lease(&args[2..]),
        Some("deploy-hold") => deploy::deploy_hold(&args[2..]),
        _ => {}
    }
    let tests = [
        (
            "remote::examples_match_local",
            remote::examples_match_local as fn() -> support::TestResult,
        ),
        (
            "remote::a_failing_run_fails_alike",
            remote::a_failing_run_fails_alike,
        ),
        (
            "remote::pipelined_failures_surface_at_the_next_sync",
            remote::pipelined_failures_surface_at_the_next_sync,
        ),
        (
            "remote::large_transfers_round_trip",
            remote::large_transfers_round_trip,
        ),
        (
            "remote::relocated_arguments_reach_the_kernel_through_the_node",
            remote::relocated_arguments_reach_the_kernel_through_the_node,
        ),
        (
            "remote::a_burst_through_the_node_is_the_local_one",
            remote::a_burst_through_the_node_is_the_local_one,
        ),
        (
            "remote::graphs_and_reloads_through_the_node_are_the_local_ones",
            remote::graphs_and_reloads_through_the_node_are_the_local_ones,
        ),
        (
            "remote::a_remote_modules_signatures_are_the_local_ones",
            remote::a_remote_modules_signatures_are_the_local_ones,
        ),
        (
            "remote::reads_into_tasklet_memory_through_the_node_are_the_local_ones",
            remote::reads_into_tasklet_memory_through_the_node_are_the_local_ones,
        ),
        (
            "forks::spread_transfers_keep_the_sessions_order",
            forks::spread_transfers_keep_the_sessions_order,
        ),
        (
            "forks::a_refusal_before_a_spread_read_is_reported_by_the_read",
            forks::a_refusal_before_a_spread_read_is_reported_by_the_read,
        ),
        (
            "forks::a_branch_before_its_fork_waits_for_it",
            forks::a_branch_before_its_fork_waits_for_it,
        ),
        (
            "forks::every_misuse_of_a_fork_is_a_protocol_error",
            forks::every_misuse_of_a_fork_is_a_protocol_error,
        ),
        (
            "forks::forks_and_branches_wait_for_each_other_until_the_connection_ends",
            forks::forks_and_branches_wait_for_each_other_until_the_connection_ends,
        ),
        (
            "forks::large_reads_pipelined_on_one_stream_come_back_whole",
            forks::large_reads_pipelined_on_one_stream_come_back_whole,
        ),
        (
            "forks::a_tasklets_large_transfers_through_the_node_are_spread",
            forks::a_tasklets_large_transfers_through_the_node_are_spread,
        ),
        (
            "forks::a_transfer_spreads_over_the_most_branches_a_fork_may_have",
            forks::a_transfer_spreads_over_the_most_branches_a_fork_may_have,
        ),
        (
            "forks::large_reads_on_two_streams_may_be_read_one_after_the_other",
            forks::large_reads_on_two_streams_may_be_read_one_after_the_other,
        ),
        (
            "forks::a_write_whose_end_would_wrap_is_refused_and_the_session_goes_on",
            forks::a_write_whose_end_would_wrap_is_refused_and_the_session_goes_on,
        ),
        (
            "forks::a_refused_write_drops_its_later_pieces_whatever_a_barrier_reports_meanwhile",
            forks::a_refused_write_drops_its_later_pieces_whatever_a_barrier_reports_meanwhile,
        ),
        (
            "groups::a_group_lands_on_distinct_devices_in_placement_order",
            groups::a_group_lands_on_distinct_devices_in_placement_order,
        ),
        (
            "groups::a_group_that_cannot_be_placed_whole_holds_nothing",
            groups::a_group_that_cannot_be_placed_whole_holds_nothing,
        ),
        (
            "groups::a_copy_between_two_sessions_of_a_group_moves_the_bytes",
            groups::a_copy_between_two_sessions_of_a_group_moves_the_bytes,
        ),
        (
            "groups::a_session_of_another_connection_is_refused",
            groups::a_session_of_another_connection_is_refused,
        ),
        (
            "groups::malformed_groups_and_copies_close_only_their_connection",
            groups::malformed_groups_and_copies_close_only_their_connection,
        ),
        (
            "groups::a_tasklets_group_through_the_node_is_the_local_one",
            groups::a_tasklets_group_through_the_node_is_the_local_one,
        ),
        (
            "groups::a_client_of_version_5_is_told_at_hello",
            groups::a_client_of_version_5_is_told_at_hello,
        ),
        (
            "streams::the_probes_streams_through_the_node_are_the_local_ones",
            streams::the_probes_streams_through_the_node_are_the_local_ones,
        ),
        (
            "streams::a_stream_or_event_of_another_session_or_connection_is_refused",
            streams::a_stream_or_event_of_another_session_or_connection_is_refused,
        ),
        (
            "streams::the_sessions_limits_hold_over_the_wire",
            streams::the_sessions_limits_hold_over_the_wire,
        ),
        (
            "streams::a_failed_pipelined_op_surfaces_at_a_streams_sync",
            streams::a_failed_pipelined_op_surfaces_at_a_streams_sync,
        ),
        (
            "streams::malformed_queue_ops_close_only_their_connection",
            streams::malformed_queue_ops_close_only_their_connection,
        ),
        (
            "streams::examples_on_streams_through_the_node_are_the_local_ones",
            streams::examples_on_streams_through_the_node_are_the_local_ones,
        ),
        (
            "streams::a_client_of_version_6_is_told_at_hello",
            streams::a_client_of_version_6_is_told_at_hello,
        ),
        (
            "stream_ops::writes_launches_and_reads_on_streams_give_the_local_bytes",
            stream_ops::writes_launches_and_reads_on_streams_give_the_local_bytes,
        ),
        (
            "stream_ops::on_a_gpu_a_remote_copy_on_one_stream_runs_beside_a_kernel_on_another",
            stream_ops::on_a_gpu_a_remote_copy_on_one_stream_runs_beside_a_kernel_on_another,
        ),
        (
            "stream_ops::a_stream_not_the_sessions_is_refused_for_each_stream_op",
            stream_ops::a_stream_not_the_sessions_is_refused_for_each_stream_op,
        ),
        (
            "stream_ops::the_node_refuses_a_foreign_stream_in_frames_that_skip_the_check",
            stream_ops::the_node_refuses_a_foreign_stream_in_frames_that_skip_the_check,
        ),
        (
            "stream_ops::malformed_stream_ops_close_only_their_connection",
            stream_ops::malformed_stream_ops_close_only_their_connection,
        ),
        (
            "stream_ops::a_client_of_version_7_is_told_at_hello",
            stream_ops::a_client_of_version_7_is_told_at_hello,
        ),
        (
            "refusals::a_client_without_a_certificate_is_refused",
            refusals::a_client_without_a_certificate_is_refused,
        ),
        (
            "refusals::a_certificate_from_another_ca_is_refused",
            refusals::a_certificate_from_another_ca_is_refused,
        ),
        (
            "refusals::an_expired_certificate_is_refused",
            refusals::an_expired_certificate_is_refused,
        ),
        (
            "refusals::a_node_with_an_expired_certificate_does_not_start",
            refusals::a_node_with_an_expired_certificate_does_not_start,
        ),
        (
            "malformed::nothing_is_served_after_a_goaway",
            malformed::nothing_is_served_after_a_goaway,
        ),
        (
            "malformed::unfinished_frames_hold_at_most_the_connections_budget",
            malformed::unfinished_frames_hold_at_most_the_connections_budget,
        ),
        (
            "malformed::unread_replies_hold_at_most_the_connections_reply_budget",
            malformed::unread_replies_hold_at_most_the_connections_reply_budget,
        ),
        (
            "malformed::abandoned_uploads_past_the_budget_go_with_their_connection",
            malformed::abandoned_uploads_past_the_budget_go_with_their_connection,
        ),
        (
            "refusals::a_tenant_past_its_connections_is_refused_and_others_get_in",
            refusals::a_tenant_past_its_connections_is_refused_and_others_get_in,
        ),
        (
            "refusals::a_full_node_refuses_a_connection_and_the_client_says_why",
            refusals::a_full_node_refuses_a_connection_and_the_client_says_why,
        ),
        (
            "refusals::a_tenant_the_policy_does_not_list_is_refused",
            refusals::a_tenant_the_policy_does_not_list_is_refused,
        ),
        (
            "tenant_totals::a_tenants_connections_together_hold_at_most_its_totals",
            tenant_totals::a_tenants_connections_together_hold_at_most_its_totals,
        ),
        (
            "tenant_totals::a_total_of_zero_says_the_policy_allows_none",
            tenant_totals::a_total_of_zero_says_the_policy_allows_none,
        ),
        (
            "tenant_totals::a_tenants_deployed_runs_count_in_its_totals",
            tenant_totals::a_tenants_deployed_runs_count_in_its_totals,
        ),
        (
            "tenant_totals::a_tenants_deployments_are_capped",
            tenant_totals::a_tenants_deployments_are_capped,
        ),
        (
            "refusals::an_authorizer_narrows_and_refuses",
            refusals::an_authorizer_narrows_and_refuses,
        ),
        (
            "refusals::a_node_of_another_ca_is_refused_by_the_client",
            refusals::a_node_of_another_ca_is_refused_by_the_client,
        ),
        (
            "refusals::a_port_nothing_listens_on_is_named_at_once",
            refusals::a_port_nothing_listens_on_is_named_at_once,
        ),
        (
            "refusals::the_manifests_grant_is_enforced_by_the_node",
            refusals::the_manifests_grant_is_enforced_by_the_node,
        ),
        (
            "isolation::another_tenants_ids_are_refused",
            isolation::another_tenants_ids_are_refused,
        ),
        (
            "malformed::garbage_closes_only_its_connection",
            malformed::garbage_closes_only_its_connection,
        ),
        (
            "lifecycle::a_killed_client_leaves_nothing_behind",
            lifecycle::a_killed_client_leaves_nothing_behind,
        ),
        (
            "lifecycle::a_killed_node_is_reported_disconnected_and_leaves_no_worker",
            lifecycle::a_killed_node_is_reported_disconnected_and_leaves_no_worker,
        ),
        (
            "lifecycle::a_lease_expires_during_a_remote_session",
            lifecycle::a_lease_expires_during_a_remote_session,
        ),
        (
            "lifecycle::a_stalled_client_holds_nothing_past_its_timeout",
            lifecycle::a_stalled_client_holds_nothing_past_its_timeout,
        ),
        (
            "lifecycle::a_drain_refuses_new_leases_while_a_session_finishes",
            lifecycle::a_drain_refuses_new_leases_while_a_session_finishes,
        ),
        (
            "submit::gpu_submit_runs_one_kernel_and_reports_each_status",
            submit::gpu_submit_runs_one_kernel_and_reports_each_status,
        ),
        (
            "submit::gpu_submit_writes_its_input_before_the_launch",
            submit::gpu_submit_writes_its_input_before_the_launch,
        ),
        (
            "submit::a_refused_first_submission_leaves_the_lease_untouched",
            submit::a_refused_first_submission_leaves_the_lease_untouched,
        ),
        (
            "oneshot::a_client_of_another_version_is_told_at_hello",
            oneshot::a_client_of_another_version_is_told_at_hello,
        ),
        (
            "oneshot::one_shots_fail_alike_here_and_on_the_node",
            oneshot::one_shots_fail_alike_here_and_on_the_node,
        ),
        (
            "oneshot::a_remote_wait_ends_at_the_runs_wall_time",
            oneshot::a_remote_wait_ends_at_the_runs_wall_time,
        ),
        (
            "oneshot::a_client_that_leaves_mid_sync_frees_its_lease_at_once",
            oneshot::a_client_that_leaves_mid_sync_frees_its_lease_at_once,
        ),
        (
            "oneshot::a_tasklet_with_a_remote_gpu_ends_at_its_wall_time",
            oneshot::a_tasklet_with_a_remote_gpu_ends_at_its_wall_time,
        ),
        (
            "oneshot::a_lost_one_shot_moves_to_the_next_node_and_a_session_does_not",
            oneshot::a_lost_one_shot_moves_to_the_next_node_and_a_session_does_not,
        ),
        (
            "metrics::a_tasklet_one_shot_is_one_gpu_submit",
            metrics::a_tasklet_one_shot_is_one_gpu_submit,
        ),
        (
            "deploy::a_pushed_tasklet_runs_as_it_does_locally",
            deploy::a_pushed_tasklet_runs_as_it_does_locally,
        ),
        (
            "deploy::a_push_is_idempotent_and_an_unknown_digest_is_not_found",
            deploy::a_push_is_idempotent_and_an_unknown_digest_is_not_found,
        ),
        (
            "deploy::a_tenant_without_the_deploy_right_is_unauthorized",
            deploy::a_tenant_without_the_deploy_right_is_unauthorized,
        ),
        (
            "deploy::another_tenant_cannot_run_your_deployment",
            deploy::another_tenant_cannot_run_your_deployment,
        ),
        ("deploy::a_second_run_is_warm", deploy::a_second_run_is_warm),
        (
            "deploy::refused_pushes_say_why_and_the_connection_serves_on",
            deploy::refused_pushes_say_why_and_the_connection_serves_on,
        ),
        (
            "deploy::a_deploy_request_before_hello_closes_the_connection",
            deploy::a_deploy_request_before_hello_closes_the_connection,
        ),
        (
            "deploy::a_run_gets_its_manifest_within_the_tenants_ceiling",
            deploy::a_run_gets_its_manifest_within_the_tenants_ceiling,
        ),
        (
            "deploy::a_drain_lets_a_running_deployment_finish",
            deploy::a_drain_lets_a_running_deployment_finish,
        ),
        (
            "deploy::a_drain_delivers_the_last_runs_whole_output",
            deploy::a_drain_delivers_the_last_runs_whole_output,
        ),
        (
            "deploy::a_killed_clients_run_is_stopped",
            deploy::a_killed_clients_run_is_stopped,
        ),
        (
            "deploy::check_store_refuses_a_store_a_running_node_holds",
            deploy::check_store_refuses_a_store_a_running_node_holds,
        ),
        (
            "metrics::counters_move_as_the_ops_say",
            metrics::counters_move_as_the_ops_say,
        ),
        (
            "metrics::each_device_is_lent_and_has_its_own_series",
            metrics::each_device_is_lent_and_has_its_own_series,
        ),
        (
            "metrics::a_deployed_group_is_counted_lease_by_lease",
            metrics::a_deployed_group_is_counted_lease_by_lease,
        ),
        (
            "metrics::a_remote_group_is_counted_lease_by_lease",
            metrics::a_remote_group_is_counted_lease_by_lease,
        ),
        (
            "metrics::garbage_to_the_metrics_port_gets_4xx_and_the_node_serves_on",
            metrics::garbage_to_the_metrics_port_gets_4xx_and_the_node_serves_on,
        ),
        (
            "metrics::gpu_time_is_counted_for_the_tenant_whose_kernels_ran",
            metrics::gpu_time_is_counted_for_the_tenant_whose_kernels_ran,
        ),
        (
            "metrics::runaways_through_the_node_are_charged_their_deadline_once",
            metrics::runaways_through_the_node_are_charged_their_deadline_once,
        ),
        (
            "metrics::the_module_cache_is_shared_by_connections_and_counted",
            metrics::the_module_cache_is_shared_by_connections_and_counted,
        ),
        (
            "cluster::nodes_register_drain_and_leave",
            cluster::nodes_register_drain_and_leave,
        ),
        (
            "cluster::a_lease_reaches_the_registry_before_the_next_heartbeat",
            cluster::a_lease_reaches_the_registry_before_the_next_heartbeat,
        ),
        (
            "cluster::a_killed_node_is_gone_within_10s",
            cluster::a_killed_node_is_gone_within_10s,
        ),
        (
            "cluster::a_node_serves_without_nats_and_registers_when_it_comes",
            cluster::a_node_serves_without_nats_and_registers_when_it_comes,
        ),
    ];
    let trials = tests
        .into_iter()
        .map(|(name, test)| Trial::test(name, test))
        .collect();
    libtest_mimic::run(&Arguments::from_args(), trials).exit_code()
}
