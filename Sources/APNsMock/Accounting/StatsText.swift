/// Renders stats in the Prometheus text format, so the mock can be scraped like pushd.
enum StatsText {
    static func render(_ stats: MockStats) -> String {
        var out = ""
        out += "# HELP apns_mock_accepted_total Notifications answered 200.\n"
        out += "# TYPE apns_mock_accepted_total counter\n"
        out += "apns_mock_accepted_total \(stats.accepted)\n"
        out += "# HELP apns_mock_rejected_total Error answers by status and reason.\n"
        out += "# TYPE apns_mock_rejected_total counter\n"
        for key in stats.rejected.keys.sorted() {
            let parts = key.split(separator: " ", maxSplits: 1)
            let status = parts.first.map(String.init) ?? ""
            let reason = parts.count > 1 ? String(parts[1]) : ""
            out += "apns_mock_rejected_total{status=\"\(status)\",reason=\"\(reason)\"} \(stats.rejected[key] ?? 0)\n"
        }
        let counters: [(String, String, Int)] = [
            ("apns_mock_requests_received_total", "Complete requests received.", stats.requestsReceived),
            ("apns_mock_delayed_answer_writes_total", "Writes carrying answers held back by a delay; answers due together share one.", stats.delayedAnswerWrites),
            ("apns_mock_connections_accepted_total", "TLS connections accepted.", stats.connectionsAccepted),
            ("apns_mock_connections_closed_total", "Connections closed.", stats.connectionsClosed),
            ("apns_mock_connections_closed_by_client_total", "Connections the client ended (GOAWAY, close or reset) before the mock sent a GOAWAY.",
             stats.connectionsClosedByClient),
            ("apns_mock_connections_reset_total", "Connections reset by fault injection.", stats.connectionsReset),
            ("apns_mock_streams_reset_total", "Streams reset (RST_STREAM) instead of answered by fault injection.", stats.streamsReset),
            ("apns_mock_streams_refused_total", "Streams left unprocessed after a GOAWAY.", stats.streamsRefused),
            ("apns_mock_client_certificates_refused_total", "Connections refused for their client certificate (alert or reset).",
             stats.clientCertificatesRefused),
            ("apns_mock_tls_handshakes_resumed_total", "TLS handshakes that resumed an earlier session (TLS 1.3 PSK, TLS 1.2 ticket or session id).",
             stats.handshakesResumed),
            ("apns_mock_goaways_sent_total", "GOAWAY frames sent.", stats.goaways.count),
            ("apns_mock_accepted_not_logged_total", "Accepted notifications left out of the full accepted log.", stats.acceptedNotLogged),
            ("apns_mock_pings_received_total", "HTTP/2 PING frames received (ACKs not counted).", stats.pingsReceived),
            ("apns_mock_client_resets_total", "RST_STREAM frames received from clients.", stats.clientResets),
            ("apns_mock_client_resets_after_answer_total", "RST_STREAM frames received from clients for streams already answered.", stats.clientResetsAfterAnswer),
            ("apns_mock_provider_token_verifications_total", "ES256 signature checks of provider tokens.", stats.providerTokenVerifications),
            ("apns_mock_channels_created_total", "Broadcast channels created.", stats.channelsCreated),
            ("apns_mock_channels_deleted_total", "Broadcast channels deleted.", stats.channelsDeleted),
            ("apns_mock_broadcasts_accepted_total", "Broadcast notifications answered 200, all channels.", stats.broadcastsAccepted.values.reduce(0, +)),
        ]
        for (name, help, value) in counters {
            out += "# HELP \(name) \(help)\n# TYPE \(name) counter\n\(name) \(value)\n"
        }
        // Accepted connections count every reconnect; these say how many were open at once.
        let gauges: [(String, String, Int)] = [
            ("apns_mock_connections_open", "Connections open now.", stats.connectionsAccepted - stats.connectionsClosed),
            ("apns_mock_connections_open_peak", "The most connections open at one time.", stats.connectionsOpenPeak),
        ]
        for (name, help, value) in gauges {
            out += "# HELP \(name) \(help)\n# TYPE \(name) gauge\n\(name) \(value)\n"
        }
        return out
    }
}
