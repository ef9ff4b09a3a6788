import { AccessPolicy, bindingProblem, type ControlAccessConfig } from "@holdfast/access";

/**
 * Who may read the gateway's health details (pid, runs cached and held, peers): a caller
 * with control.read_token or control.token, as for every read of the control API. With no
 * token configured, anyone, as long as the gateway listens on loopback (or
 * control.insecure allows it elsewhere); off loopback without a token, nobody. A request
 * without a known token is not refused: it gets liveness only, since the Authorization an
 * agent sends the gateway is its provider key.
 */
export function healthReaders(control: ControlAccessConfig): (authorization: string | undefined) => boolean {
  const policy = new AccessPolicy(control, { name: "gateway's health details", readOnly: "read them" });
  if (!policy.required) {
    const open = bindingProblem(control) === undefined;
    return () => open;
  }
  return (authorization) => {
    try {
      policy.authorize(authorization, "read");
      return true;
    } catch {
      return false;
    }
  };
}
