// Image references as requests give them: the one parser (images/reference.ts), its errors as
// 400s naming the field. Kept apart from images.ts so that callers that only check a name (the
// CLI, before it decides whether a word is an image) do not load the registry client.
import { parseReference, type ImageReference } from "../../images/reference.js";

export { familiarName } from "../../images/reference.js";
import { badRequest } from "../../http/errors.js";

/** A registry reference parsed, or a 400 naming the image field. */
export function parseImageReference(reference: string): ImageReference {
  try {
    return parseReference(reference);
  } catch (e) {
    throw badRequest(`image: ${(e as Error).message}`);
  }
}
