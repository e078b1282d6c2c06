import APNs

/// One control answer.
struct ControlResponse {
    var status: Int
    var contentType: String
    var body: String

    var serialized: String {
        let phrase = status == 200 ? "OK" : status == 404 ? "Not Found" : status == 405 ? "Method Not Allowed" : "Bad Request"
        return "HTTP/1.1 \(status) \(phrase)\r\ncontent-type: \(contentType)\r\ncontent-length: \(body.utf8.count)\r\nconnection: close\r\n\r\n\(body)"
    }
}

/// Maps control requests to server calls:
/// `GET /metrics` (Prometheus text), `GET /stats`, `GET /accepted`, `GET /faults` (JSON),
/// `PUT /faults` (replace with the JSON body), `POST /goaway`, `POST /reset`.
struct ControlRouter: Sendable {
    private weak var serverReference: APNsMockServer?
    init(server: APNsMockServer) { serverReference = server }

    func route(method: String, path: String, body: [UInt8]) -> ControlResponse {
        guard let server = serverReference else { return text(503, "server stopped\n") }
        switch (method, path) {
        case ("GET", "/metrics"): return ControlResponse(status: 200, contentType: "text/plain; version=0.0.4", body: server.metricsText)
        case ("GET", "/stats"): return json(server.stats)
        case ("GET", "/accepted"): return json(server.acceptedLog)
        case ("GET", "/faults"): return json(server.faults)
        case ("PUT", "/faults"), ("POST", "/faults"):
            do {
                let faults = try JSONValueDecoder().decode(FaultConfiguration.self, from: body)
                try server.setFaults(faults)
                return json(server.faults)
            } catch let error as MockServerError {
                return text(400, "\(error)\n")
            } catch {
                return text(400, "faults body is not a valid fault configuration JSON object: \(error)\n")
            }
        case ("POST", "/goaway"):
            server.sendGoawayToAll()
            return text(200, "ok\n")
        case ("POST", "/reset"):
            server.resetStats()
            return text(200, "ok\n")
        case (_, "/metrics"), (_, "/stats"), (_, "/accepted"), (_, "/faults"), (_, "/goaway"), (_, "/reset"):
            return text(405, "method \(method) not allowed on \(path)\n")
        default:
            return text(404, "no control endpoint \(path); try /metrics, /stats, /accepted, /faults, /goaway, /reset\n")
        }
    }

    private func json<T: Encodable>(_ value: T) -> ControlResponse {
        var encoder = JSONValueEncoder()
        encoder.sortedKeys = true
        let data = (try? encoder.encode(value))?.compactBytes ?? Array("null".utf8)
        return ControlResponse(status: 200, contentType: "application/json", body: String(decoding: data, as: UTF8.self) + "\n")
    }

    private func text(_ status: Int, _ body: String) -> ControlResponse {
        ControlResponse(status: status, contentType: "text/plain", body: body)
    }
}
