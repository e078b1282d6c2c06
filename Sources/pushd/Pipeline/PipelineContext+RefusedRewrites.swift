import Locking
import QueueStore

extension PipelineContext {
    /// Waiting rows a CHECK of their table refused to write again (one an operator or a
    /// migration added NOT VALID after they were queued), now dead letters (`RefusedRewrite`):
    /// each counts in `pushd_dead_letters_total{reason="requeue_refused"}` on `lane`, and one
    /// error line (`rewrite_refused`) a minute at most per process names the table, the check
    /// and the job ids, with how many there were since the last line.
    func reportRefusedRewrites(_ refused: [RefusedRewrite], lane: String, doing: String) {
        guard let first = refused.first else { return }
        for item in refused {
            metrics.deadLetter(app: item.app, lane: lane, reason: "requeue_refused").increment()
            operatorLog.deadLettered(reason: "requeue_refused")
            tally.add(tally.dead)
        }
        let now = RateLimiter.monotonicSeconds()
        let since: Int? = refusedRewrites.withLock { state in
            state.count += refused.count
            guard now - state.loggedAt >= 60 else { return nil }
            defer { state = (0, now) }
            return state.count
        }
        guard let since else { return }
        let ids = refused.prefix(10).map { String($0.id) }.joined(separator: ", ") + (refused.count > 10 ? ", …" : "")
        logger.error("\(since) waiting job(s) could not be \(doing) and were dead-lettered: CHECK \(first.check ?? "unknown") of \(first.table), added after they were queued, refuses them (job \(ids) of app \(first.app): \(first.message)); see pushd.dead_jobs",
                     ("event", "rewrite_refused"), ("lane", .string(lane)), ("table", .string(first.table)),
                     ("check", .string(first.check ?? "unknown")), ("app", .string(first.app)), ("ids", .string(ids)),
                     ("jobs", .int(Int64(since))))
    }
}

extension PipelineContext {
    /// `reportRefusedRewrites` of rows made due again (a pause, a hold or an outage ended),
    /// each on its own lane: jobs on the transactional lane, broadcasts on theirs.
    func reportRefusedRewrites(madeDue refused: [RefusedRewrite]) {
        let jobs = refused.filter { $0.table == "pushd.jobs" }
        reportRefusedRewrites(jobs, lane: Lane.transactional.rawValue, doing: "made due again")
        reportRefusedRewrites(refused.filter { $0.table != "pushd.jobs" }, lane: BroadcastWorker.lane, doing: "made due again")
    }
}

extension PipelineContext {
    /// The campaigns held for a refused row, in the words `/readyz` uses after "held: ": the
    /// process stays ready (the rest sends), but says that these send nothing.
    func heldCampaignsDetail() -> [String] {
        let holds = campaignHolds.withLock { $0 }
        let shown = holds.prefix(5).map { held in
            "campaign \(held.campaignID) of app \(held.app): CHECK \(held.check ?? "(unnamed)") of pushd.campaigns refuses its row, "
                + "nothing of it is sent (not counted as due; pushd.campaign_refusals)"
        }
        return holds.count > shown.count ? shown + ["and \(holds.count - shown.count) more campaign(s) (pushd status)"] : shown
    }

    /// A campaign held because a CHECK of `pushd.campaigns` refuses to write its row
    /// (`CampaignRefusal`): one error line (`campaign_refused`) per campaign an hour at most per
    /// process names the campaign, the check, what it says and how to end the hold. The hold
    /// is counted in `pushd_campaigns{status="refused"}`, read from the database.
    func reportRefusedCampaign(_ held: CampaignRefusal) {
        let now = RateLimiter.monotonicSeconds()
        let due = refusedCampaigns.withLock { logged -> Bool in
            if let last = logged[held.campaignID], now - last < 3600 { return false }
            logged[held.campaignID] = now
            return true
        }
        guard due else { return }
        logger.error("campaign \(held.campaignID) of app \(held.app) is held: \(held.explanation)",
                     ("event", "campaign_refused"), ("campaign", .int(held.campaignID)), ("app", .string(held.app)),
                     ("table", "pushd.campaigns"), ("check", .string(held.check ?? "unknown")))
    }
}

extension PipelineContext {
    /// Token prunes the database did not write (`TokenStore.prune`): those a CHECK of
    /// `pushd.device_tokens` refused (reason `prune_refused`) and those that failed otherwise,
    /// a token's row locked past `lock_timeout` say (reason `prune_failed`). The tokens stay as
    /// they were (the next notification to one is answered 400 or 410 again, and pruned then),
    /// so each counts in `pushd_tokens_kept_total`, and one error line (`token_prune_refused`,
    /// `token_prune_failed`) a minute at most per process and kind names the cause, the app and
    /// the token's first characters.
    func reportRefusedPrunes(_ outcome: PruneOutcome) {
        report(outcome.refused, reason: "prune_refused", gate: refusedPrunes) { first, since in
            "\(since) device token(s) APNs refused (\(first.prune.reason)) could not be marked invalid: CHECK \(first.check ?? "unknown") of pushd.device_tokens, added after they were registered, refuses the row (token \(Logger.redactToken(first.prune.token)) of app \(first.prune.app): \(first.message)); they stay live and the rest of the batch settles"
        }
        report(outcome.failed, reason: "prune_failed", gate: failedPrunes) { first, since in
            "\(since) device token(s) APNs refused (\(first.prune.reason)) could not be marked invalid: the database did not write the prune (token \(Logger.redactToken(first.prune.token)) of app \(first.prune.app): \(first.message)); they stay live and the rest of the batch settles"
        }
    }

    private func report(_ prunes: [RefusedPrune], reason: String, gate: Lock<(count: Int, loggedAt: Double)>,
                        line: (RefusedPrune, Int) -> String) {
        guard let first = prunes.first else { return }
        for item in prunes {
            metrics.tokenKept(app: item.prune.app, environment: senders[item.prune.app]?.environmentLabel ?? "unknown",
                              reason: reason).increment()
        }
        let now = RateLimiter.monotonicSeconds()
        let since: Int? = gate.withLock { state in
            state.count += prunes.count
            guard now - state.loggedAt >= 60 else { return nil }
            defer { state = (0, now) }
            return state.count
        }
        guard let since else { return }
        logger.error(line(first, since),
                     ("event", .string("token_\(reason)")), ("table", "pushd.device_tokens"), ("check", .string(first.check ?? "none")),
                     ("app", .string(first.prune.app)), ("tokens", .int(Int64(since))))
    }
}
