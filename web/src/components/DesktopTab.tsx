// A desktop sandbox's screen, live (noVNC through the server, in a frame whose page runs in an
// origin of its own): take it over or watch only, and take screenshots. A sandbox without the
// desktop image says how to get one; a paused one says to resume it (its view would not wake it).
import { useEffect, useState } from "react";
import { api, apiStream, q } from "../api";
import { Action, Card, ErrorBox } from "../ui";

export function DesktopTab({ id, state }: { id: string; state: string }) {
  const [viewOnly, setViewOnly] = useState(false);
  const [url, setUrl] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [shot, setShot] = useState<string | null>(null);
  const running = state === "running";

  useEffect(() => {
    if (!running) return;
    let gone = false;
    setUrl(null);
    setError(null);
    api("POST", `/sandboxes/${q(id)}/desktop/stream`, { view_only: viewOnly }).then(
      (s) => !gone && setUrl(s.url),
      (e: Error) => !gone && setError(e.message),
    );
    return () => {
      gone = true;
    };
  }, [id, viewOnly, running]);

  useEffect(() => () => void (shot && URL.revokeObjectURL(shot)), [shot]);

  if (!running) return <p className="muted">{state === "paused" ? "the sandbox is paused: resume it to see its desktop" : "the sandbox is not running"}</p>;
  return (
    <>
      <ErrorBox error={error} onClose={() => setError(null)} />
      <Card
        title={viewOnly ? "Desktop (watching)" : "Desktop (in control)"}
        actions={
          <>
            <Action
              label={viewOnly ? "Take over" : "Watch only"}
              title={viewOnly ? "send your keys and clicks to the sandbox" : "see the screen without sending keys or clicks"}
              onError={setError}
              run={async () => setViewOnly(!viewOnly)}
            />
            <Action
              label="Screenshot"
              onError={setError}
              run={async () => {
                const blob = await (await apiStream("GET", `/sandboxes/${q(id)}/desktop/screenshot`)).blob();
                setShot(URL.createObjectURL(blob));
              }}
            />
          </>
        }
      >
        {url ? <iframe className="desktop-view" src={url} title="desktop" data-testid="desktop-view" /> : !error && <p className="muted">starting the live view…</p>}
      </Card>
      {shot && (
        <Card
          title="Screenshot"
          actions={
            <a href={shot} download={`${id}.png`}>
              Download
            </a>
          }
        >
          <img className="desktop-shot" src={shot} alt="screenshot of the desktop" data-testid="desktop-shot" />
        </Card>
      )}
    </>
  );
}
