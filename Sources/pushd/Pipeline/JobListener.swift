import Foundation
import QueueStore

/// LISTENs for the insert trigger's notification on a connection of its own and rings
/// the doorbell, so a committed job is claimed within milliseconds. Reconnects with
/// backoff; while it is down the workers' one-second poll keeps jobs moving.
final class JobListener: @unchecked Sendable {
    // The connection lives only on the listener's thread.
    private let context: PipelineContext
    let finished = DispatchSemaphore(value: 0)

    init(context: PipelineContext) {
        self.context = context
    }

    func start() {
        let thread = Thread { [self] in
            run()
            finished.signal()
        }
        thread.name = "pushd-listener"
        thread.start()
    }

    private func run() {
        var connection: PGConnection?
        var failures = 0
        while !context.isStopping {
            do {
                if connection == nil {
                    let fresh = try QueueSession.connect(url: context.config.databaseURL, applicationName: "pushd-listener")
                    try JobQueue().listen(fresh)
                    connection = fresh
                    // Jobs may have arrived while no one listened.
                    context.doorbell.ring()
                }
                if try !connection!.waitForNotifications(timeoutMilliseconds: 500).isEmpty {
                    context.doorbell.ring()
                }
                failures = 0
            } catch {
                failures += 1
                context.databaseError(error)
                context.logger.warning("job listener: \(error)")
                connection?.close()
                connection = nil
                Thread.sleep(forTimeInterval: min(30.0, 0.2 * pow(2.0, Double(min(failures, 8)))))
            }
        }
        connection?.close()
    }
}
